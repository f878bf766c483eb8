package server

import (
	"context"
	"fmt"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/outpost-sh/outpost/internal/blob"
	"github.com/outpost-sh/outpost/internal/datadir"
)

// Where a server keeps its blobs (Options.BlobStore): snapshots/<key>,
// artifacts/<session>/<name> with artifacts/<session>/.meta/<name>.json,
// and output/<session>/<seq>.log — in the data dir (the layout servers
// always had) or in the PostgreSQL database of the store, where every
// replica on the database reads what any of them wrote.
const (
	BlobStoreFS       = "fs"
	BlobStorePostgres = "postgres"
)

// blobPrefixes are the top-level prefixes of the server's blobs.
var blobPrefixes = []string{"snapshots/", datadir.Artifacts + "/", datadir.Output + "/"}

// pooled is a store on a PostgreSQL pool (the postgres store).
type pooled interface{ Pool() *pgxpool.Pool }

// openBlobs opens the blob store Options.BlobStore names. A server that
// keeps its blobs in PostgreSQL first moves there those the data dir still
// holds from when it kept them in files, so downloads go on working.
func (s *Server) openBlobs(ctx context.Context) error {
	files := blob.FS{Dir: s.opts.DataDir}
	pg, isPG := s.store.(pooled)
	kind := s.opts.BlobStore
	if kind == "" {
		kind = BlobStoreFS
		if isPG {
			kind = BlobStorePostgres
		}
	}
	var root blob.Store
	switch kind {
	case BlobStoreFS:
		root = files
	case BlobStorePostgres:
		if !isPG {
			return fmt.Errorf("server: the blob store %q needs the PostgreSQL store (--database postgres://…); use --blob-store fs with the embedded database", kind)
		}
		root = blob.NewPostgres(pg.Pool(), blob.PostgresOptions{Now: s.now})
		for _, prefix := range blobPrefixes {
			n, bytes, err := blob.Move(ctx, root, files, prefix)
			if n > 0 {
				s.log.Info("moved blobs from the data dir into the database", "prefix", prefix, "blobs", n, "bytes", bytes)
			}
			if err != nil {
				return fmt.Errorf("server: move the data dir's %s into the database's blob store: %w", prefix, err)
			}
		}
	default:
		return fmt.Errorf("server: unknown blob store %q: use %q or %q", kind, BlobStoreFS, BlobStorePostgres)
	}
	s.blobs = blob.Sub(root, "snapshots/")
	s.artifactBlobs = blob.Sub(root, datadir.Artifacts+"/")
	s.outputBlobs = blob.Sub(root, datadir.Output+"/")
	s.log.Debug("blob store", "kind", kind)
	return nil
}
