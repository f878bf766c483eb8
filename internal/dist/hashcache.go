package dist

import (
	"io"
	"os"
	"sync"
	"time"
)

// hashCache remembers the SHA-256 of files by path, size and modification
// time, so each published binary is hashed once, not per request. Callers
// asking for one file at once wait for a single hash.
type hashCache struct {
	mu      sync.Mutex         // guards the following
	entries map[string]*hashed // by path
	hashed  int                // files hashed so far (for tests)
}

// hashed is one file's hash; done is closed once sum and err are set.
type hashed struct {
	size int64
	mod  time.Time
	done chan struct{}
	sum  string
	err  error
}

func newHashCache() *hashCache { return &hashCache{entries: map[string]*hashed{}} }

// sum returns the hex SHA-256 of the open file f at path, whose stat is fi.
// It reads f with ReadAt only, so f's offset is left alone.
func (c *hashCache) sum(path string, f *os.File, fi os.FileInfo) (string, error) {
	c.mu.Lock()
	e := c.entries[path]
	if e != nil && e.size == fi.Size() && e.mod.Equal(fi.ModTime()) {
		c.mu.Unlock()
		<-e.done
		return e.sum, e.err
	}
	e = &hashed{size: fi.Size(), mod: fi.ModTime(), done: make(chan struct{})}
	c.entries[path] = e
	c.hashed++
	c.mu.Unlock()

	e.sum, e.err = readerSHA256(io.NewSectionReader(f, 0, fi.Size()))
	close(e.done)
	if e.err != nil {
		c.mu.Lock()
		if c.entries[path] == e {
			delete(c.entries, path)
		}
		c.mu.Unlock()
	}
	return e.sum, e.err
}

// count is how many files were hashed.
func (c *hashCache) count() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.hashed
}
