package blob

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net/url"
	"strconv"
	"strings"

	"github.com/minio/minio-go/v7"
	"github.com/minio/minio-go/v7/pkg/credentials"
)

// DefaultS3PartSize is the part size of S3's multipart uploads: the memory
// one Put holds, and a 10,000-part upload's largest blob (50 GiB): the
// smallest part S3 takes.
const DefaultS3PartSize = 5 << 20

// S3Options configure an S3 store.
type S3Options struct {
	// Endpoint is the server's host:port; "" means s3.amazonaws.com.
	Endpoint string
	// Bucket holds the blobs; it must exist.
	Bucket string
	// Prefix is put before every key, "" or ending in '/'.
	Prefix string
	// Region is the bucket's region; "" lets the client ask.
	Region string
	// Insecure speaks plain HTTP instead of HTTPS.
	Insecure bool
	// AccessKey and SecretKey sign the requests; both "" take them from
	// the environment (AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY, or
	// MINIO_ROOT_USER and MINIO_ROOT_PASSWORD), ~/.aws/credentials or the
	// instance's IAM role.
	AccessKey, SecretKey string
	// PartSize is DefaultS3PartSize's; 0 means DefaultS3PartSize.
	PartSize int64
}

// ParseS3URL reads s3://bucket[/prefix][?endpoint=host:port&region=r&insecure=true]:
// the --blob-store value of an S3-compatible bucket.
func ParseS3URL(raw string) (S3Options, error) {
	u, err := url.Parse(raw)
	if err != nil || u.Scheme != "s3" || u.Host == "" {
		return S3Options{}, fmt.Errorf("blob store %q: want s3://bucket[/prefix][?endpoint=host:port&region=…&insecure=true]", raw)
	}
	if u.User != nil {
		return S3Options{}, errors.New("blob store s3://…: give the credentials in AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY, not in the URL")
	}
	o := S3Options{Bucket: u.Host, Prefix: strings.Trim(u.Path, "/")}
	if o.Prefix != "" {
		if err := ValidKey(o.Prefix); err != nil {
			return S3Options{}, fmt.Errorf("blob store s3://…: the prefix: %w", err)
		}
		o.Prefix += "/"
	}
	q := u.Query()
	o.Endpoint, o.Region = q.Get("endpoint"), q.Get("region")
	if v := q.Get("insecure"); v != "" {
		if o.Insecure, err = strconv.ParseBool(v); err != nil {
			return S3Options{}, fmt.Errorf("blob store s3://…: insecure=%q is not true or false", v)
		}
	}
	for k := range q {
		if k != "endpoint" && k != "region" && k != "insecure" {
			return S3Options{}, fmt.Errorf("blob store s3://…: unknown parameter %q (endpoint, region, insecure)", k)
		}
	}
	return o, nil
}

// S3 is a Store in a bucket of an S3-compatible object store, through
// github.com/minio/minio-go. A Put streams a multipart upload of PartSize
// parts (one part in memory), which the server makes visible only when it
// completes; a failed Put aborts it.
type S3 struct {
	c      *minio.Client
	bucket string
	prefix string
	part   uint64
}

var _ Store = (*S3)(nil)

// NewS3 returns the Store in o's bucket. It sends no request.
func NewS3(o S3Options) (*S3, error) {
	if o.Endpoint == "" {
		o.Endpoint = "s3.amazonaws.com"
	}
	creds := credentials.NewChainCredentials([]credentials.Provider{
		&credentials.EnvAWS{}, &credentials.EnvMinio{}, &credentials.FileAWSCredentials{}, &credentials.IAM{},
	})
	if o.AccessKey != "" || o.SecretKey != "" {
		creds = credentials.NewStaticV4(o.AccessKey, o.SecretKey, "")
	}
	c, err := minio.New(o.Endpoint, &minio.Options{Creds: creds, Secure: !o.Insecure, Region: o.Region, BucketLookup: minio.BucketLookupPath})
	if err != nil {
		return nil, fmt.Errorf("blob store s3://%s: %w", o.Bucket, err)
	}
	if o.PartSize <= 0 {
		o.PartSize = DefaultS3PartSize
	}
	return &S3{c: c, bucket: o.Bucket, prefix: o.Prefix, part: uint64(o.PartSize)}, nil
}

// Check answers whether the bucket exists and the credentials reach it.
func (s *S3) Check(ctx context.Context) error {
	ok, err := s.c.BucketExists(ctx, s.bucket)
	if err != nil {
		return fmt.Errorf("blob store s3://%s: %w", s.bucket, err)
	}
	if !ok {
		return fmt.Errorf("blob store s3://%s: no such bucket; create it first", s.bucket)
	}
	return nil
}

// Client is the store's client.
func (s *S3) Client() *minio.Client { return s.c }

// limited fails with ErrTooLarge once more than n bytes were read.
type limited struct {
	r io.Reader
	n int64
}

func (l *limited) Read(p []byte) (int, error) {
	k, err := l.r.Read(p)
	if l.n -= int64(k); l.n < 0 {
		return k, ErrTooLarge
	}
	return k, err
}

// Put implements Store.
func (s *S3) Put(ctx context.Context, key string, r io.Reader, limit int64) (int64, string, error) {
	if err := ValidKey(key); err != nil {
		return 0, "", err
	}
	h := sha256.New()
	src := &limited{r: io.TeeReader(ctxReader{ctx, r}, h), n: limit}
	info, err := s.c.PutObject(ctx, s.bucket, s.prefix+key, src, -1, minio.PutObjectOptions{
		PartSize: s.part, ContentType: "application/octet-stream"})
	if src.n < 0 {
		return limit - src.n, "", ErrTooLarge
	}
	if err != nil {
		return 0, "", fmt.Errorf("put blob %s: %w", key, err)
	}
	return info.Size, hex.EncodeToString(h.Sum(nil)), nil
}

// Get implements Store. The Info it returns has no SHA256. One GET
// streams the whole blob as it was when asked for; a Seek elsewhere asks
// for the rest of that version only (If-Match its ETag), so a blob
// replaced meanwhile fails the read rather than mixing two.
func (s *S3) Get(ctx context.Context, key string) (io.ReadSeekCloser, Info, error) {
	if err := ValidKey(key); err != nil {
		return nil, Info{}, err
	}
	core := minio.Core{Client: s.c}
	body, info, _, err := core.GetObject(ctx, s.bucket, s.prefix+key, minio.GetObjectOptions{})
	if err != nil {
		if minio.ToErrorResponse(err).Code == minio.NoSuchKey {
			return nil, Info{}, fmt.Errorf("blob %s: %w", key, ErrNotExist)
		}
		return nil, Info{}, fmt.Errorf("get blob %s: %w", key, err)
	}
	r := &s3Reader{ctx: ctx, core: core, bucket: s.bucket, object: s.prefix + key, etag: info.ETag, size: info.Size, body: body}
	return r, Info{Key: key, Size: info.Size}, nil
}

// s3Reader reads one version of an object: body from bodyPos on.
type s3Reader struct {
	ctx            context.Context
	core           minio.Core
	bucket, object string
	etag           string
	size           int64
	pos            int64
	body           io.ReadCloser
	bodyPos        int64
}

func (r *s3Reader) Read(p []byte) (int, error) {
	if r.pos >= r.size {
		return 0, io.EOF
	}
	if r.body != nil && r.bodyPos != r.pos {
		r.body.Close()
		r.body = nil
	}
	if r.body == nil {
		opts := minio.GetObjectOptions{}
		if err := opts.SetMatchETag(r.etag); err != nil {
			return 0, err
		}
		if r.pos > 0 { // SetRange(0, 0) would ask for one byte
			if err := opts.SetRange(r.pos, 0); err != nil {
				return 0, err
			}
		}
		body, _, _, err := r.core.GetObject(r.ctx, r.bucket, r.object, opts)
		if err != nil {
			return 0, fmt.Errorf("read blob %s (replaced or deleted while being read?): %w", r.object, err)
		}
		r.body, r.bodyPos = body, r.pos
	}
	n, err := r.body.Read(p)
	r.pos += int64(n)
	r.bodyPos = r.pos
	if err == io.EOF && r.pos < r.size {
		err = io.ErrUnexpectedEOF
	}
	return n, err
}

func (r *s3Reader) Seek(offset int64, whence int) (int64, error) {
	pos, err := seekPos(r.pos, r.size, offset, whence)
	if err != nil {
		return 0, err
	}
	r.pos = pos
	return pos, nil
}

func (r *s3Reader) Close() error {
	if r.body != nil {
		err := r.body.Close()
		r.body = nil
		return err
	}
	return nil
}

// Delete implements Store.
func (s *S3) Delete(ctx context.Context, key string) error {
	if err := ValidKey(key); err != nil {
		return err
	}
	if err := s.c.RemoveObject(ctx, s.bucket, s.prefix+key, minio.RemoveObjectOptions{}); err != nil &&
		minio.ToErrorResponse(err).Code != minio.NoSuchKey {
		return fmt.Errorf("delete blob %s: %w", key, err)
	}
	return nil
}

// List implements Store. The Infos it returns have no SHA256.
func (s *S3) List(ctx context.Context, prefix string) ([]Info, error) {
	if err := validPrefix(prefix); err != nil {
		return nil, err
	}
	var out []Info
	for o := range s.c.ListObjects(ctx, s.bucket, minio.ListObjectsOptions{Prefix: s.prefix + prefix, Recursive: true}) {
		if o.Err != nil {
			return nil, fmt.Errorf("list blobs %q: %w", prefix, o.Err)
		}
		key := strings.TrimPrefix(o.Key, s.prefix)
		if ValidKey(key) == nil {
			out = append(out, Info{Key: key, Size: o.Size})
		}
	}
	return out, nil // S3 lists in key order
}

// DeletePrefix implements Store.
func (s *S3) DeletePrefix(ctx context.Context, prefix string) error {
	infos, err := s.List(ctx, prefix)
	if err != nil {
		return err
	}
	for _, in := range infos {
		if err := s.Delete(ctx, in.Key); err != nil {
			return err
		}
	}
	return nil
}
