package server

import (
	"context"
	"fmt"
	"strings"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/outpost-sh/outpost/internal/blob"
	"github.com/outpost-sh/outpost/internal/datadir"
)

// Where a server keeps its blobs (Options.BlobStore): snapshots/<key>,
// artifacts/<session>/<name> with artifacts/<session>/.meta/<name>.json,
// and output/<session>/<seq>.log — in the data dir (the layout servers
// always had), in the PostgreSQL database of the store or in an
// S3-compatible bucket (s3://bucket[/prefix]), where every replica reads
// what any of them wrote.
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
	switch {
	case kind == BlobStoreFS:
		root = files
	case kind == BlobStorePostgres:
		if !isPG {
			return fmt.Errorf("server: the blob store %q needs the PostgreSQL store (--database postgres://…); use --blob-store fs with the embedded database", kind)
		}
		root = blob.NewPostgres(pg.Pool(), blob.PostgresOptions{Now: s.now})
	case strings.HasPrefix(kind, "s3://"):
		o, err := blob.ParseS3URL(kind)
		if err != nil {
			return fmt.Errorf("server: %w", err)
		}
		s3, err := blob.NewS3(o)
		if err != nil {
			return fmt.Errorf("server: %w", err)
		}
		if err := s3.Check(ctx); err != nil {
			return fmt.Errorf("server: %w", err)
		}
		root = s3
	default:
		return fmt.Errorf("server: unknown blob store %q: use %q, %q or s3://bucket[/prefix]", kind, BlobStoreFS, BlobStorePostgres)
	}
	if root != files {
		for _, prefix := range blobPrefixes {
			n, bytes, err := blob.Move(ctx, root, files, prefix)
			if n > 0 {
				s.log.Info("moved blobs from the data dir into the shared blob store", "prefix", prefix, "blobs", n, "bytes", bytes)
			}
			if err != nil {
				return fmt.Errorf("server: move the data dir's %s into the shared blob store: %w", prefix, err)
			}
		}
	}
	s.blobs = blob.Sub(root, "snapshots/")
	s.artifactBlobs = blob.Sub(root, datadir.Artifacts+"/")
	s.outputBlobs = blob.Sub(root, datadir.Output+"/")
	if where, _, _ := strings.Cut(kind, "?"); where != "" {
		s.log.Info("blob store", "store", where)
	}
	return nil
}
