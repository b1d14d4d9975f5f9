// Package cas is ForgeCI's content-addressed store on S3: sources,
// artifacts and caches are immutable blobs, namespaced by project and trust
// tier (p/<project>/<tier>/sha256/<hex>), created only with If-None-Match: *
// and with their SHA-256 signed into the upload, so that S3 itself refuses
// bytes that do not match the key; they move by presigned URLs so that
// large bytes never pass through Lambda.
package cas

import (
	"context"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	"github.com/aws/aws-sdk-go-v2/service/s3/types"
	"github.com/aws/smithy-go"
	"github.com/forgeci/forgeci/shared/awsenv"
	"github.com/forgeci/forgeci/shared/protocol"
)

// Config locates the bucket.
type Config struct {
	Bucket string
	Region string
	// Endpoint, AccessKey and SecretKey are for S3-compatible servers (the
	// local stack's versitygw). In AWS leave them empty: the SDK's default
	// chain supplies the Lambda role's credentials.
	Endpoint  string
	AccessKey string
	SecretKey string
	// PresignExpiry is how long presigned URLs are valid. Short: a URL is a
	// capability, handed out only after a lease check.
	PresignExpiry time.Duration
}

// Store is a bucket of immutable blobs.
type Store struct {
	client  *s3.Client
	presign *s3.PresignClient
	bucket  string
	expiry  time.Duration
}

// ErrNotFound means no blob has that digest.
var ErrNotFound = errors.New("blob not found")

// ErrMismatch means a blob's bytes do not match its digest or size.
var ErrMismatch = errors.New("blob does not match its digest")

// New connects to the bucket described by cfg.
func New(ctx context.Context, cfg Config) (*Store, error) {
	if cfg.Bucket == "" {
		return nil, errors.New("cas: bucket is required")
	}
	if cfg.Region == "" {
		cfg.Region = "us-east-1"
	}
	if cfg.PresignExpiry <= 0 {
		cfg.PresignExpiry = 5 * time.Minute
	}
	awsCfg, err := awsenv.Config(cfg.Region, cfg.AccessKey, cfg.SecretKey)
	if err != nil {
		return nil, fmt.Errorf("cas: %w", err)
	}
	client := s3.NewFromConfig(awsCfg, func(o *s3.Options) {
		if cfg.Endpoint != "" {
			o.BaseEndpoint = aws.String(cfg.Endpoint)
			o.UsePathStyle = true
		} else if ep := awsenv.Endpoint("S3"); ep != nil {
			o.BaseEndpoint = ep
		}
		// Checksums are ours: the blob's own SHA-256, set explicitly on
		// every upload. The SDK adds none of its own (CRC32 by default),
		// so presigned URLs stay usable by plain HTTP clients.
		o.RequestChecksumCalculation = aws.RequestChecksumCalculationWhenRequired
		o.ResponseChecksumValidation = aws.ResponseChecksumValidationWhenRequired
	})
	return &Store{client: client, presign: s3.NewPresignClient(client), bucket: cfg.Bucket, expiry: cfg.PresignExpiry}, nil
}

// BlobKey is where a blob held by one trust tier of one project lives.
// Namespacing by project closes the side channel of cross-project
// deduplication (an "exists" answer for another project's bytes) and lets
// no project put bytes under a key another will read; the tier does the
// same between a project's untrusted runs and its trusted ones.
func BlobKey(projectID string, trusted bool, digest string) string {
	tier := "untrusted"
	if trusted {
		tier = "trusted"
	}
	return "p/" + projectID + "/" + tier + "/sha256/" + strings.TrimPrefix(digest, "sha256:")
}

// checksum is the x-amz-checksum-sha256 value of a digest: the same
// SHA-256, base64 instead of hex.
func checksum(digest string) (string, error) {
	if !protocol.ValidDigest(digest) {
		return "", fmt.Errorf("cas: invalid digest %q", digest)
	}
	raw, _ := hex.DecodeString(strings.TrimPrefix(digest, "sha256:"))
	return base64.StdEncoding.EncodeToString(raw), nil
}

// EnsureBucket creates the bucket if it does not exist (local stack only;
// in AWS the template creates it).
func (s *Store) EnsureBucket(ctx context.Context) error {
	_, err := s.client.HeadBucket(ctx, &s3.HeadBucketInput{Bucket: &s.bucket})
	if err == nil {
		return nil
	}
	_, err = s.client.CreateBucket(ctx, &s3.CreateBucketInput{Bucket: &s.bucket})
	if err != nil && !isCode(err, "BucketAlreadyOwnedByYou", "BucketAlreadyExists") {
		return fmt.Errorf("cas: create bucket %s: %w", s.bucket, err)
	}
	return nil
}

// Stat returns the size of the object at key and the SHA-256 checksum S3
// verified when it was written ("" if it was written without one), or
// ErrNotFound.
func (s *Store) Stat(ctx context.Context, key string) (int64, string, error) {
	out, err := s.client.HeadObject(ctx, &s3.HeadObjectInput{Bucket: &s.bucket, Key: aws.String(key),
		ChecksumMode: types.ChecksumModeEnabled})
	if err != nil {
		if isCode(err, "NotFound", "NoSuchKey") {
			return 0, "", ErrNotFound
		}
		return 0, "", fmt.Errorf("cas: stat %s: %w", key, err)
	}
	return aws.ToInt64(out.ContentLength), aws.ToString(out.ChecksumSHA256), nil
}

// Check confirms that key holds the blob digest of size bytes, from what S3
// verified at upload (the signed x-amz-checksum-sha256), without reading it
// back: a commit of a blob of gigabytes costs one HEAD. It deletes nothing.
func (s *Store) Check(ctx context.Context, key, digest string, size int64) error {
	want, err := checksum(digest)
	if err != nil {
		return err
	}
	n, got, err := s.Stat(ctx, key)
	if err != nil {
		return err
	}
	if n != size || got != want {
		return fmt.Errorf("%w: %s holds %d bytes with checksum %q, expected %d bytes of %s", ErrMismatch, key, n, got, size, digest)
	}
	return nil
}

// Put stores size bytes from r at key, streaming, with the digest's SHA-256
// as the object's checksum, so S3 refuses bytes that do not match. An
// existing object is left alone: the key names its bytes.
func (s *Store) Put(ctx context.Context, key, digest string, r io.Reader, size int64) error {
	sum, err := checksum(digest)
	if err != nil {
		return err
	}
	_, err = s.client.PutObject(ctx, &s3.PutObjectInput{
		Bucket: &s.bucket, Key: aws.String(key), Body: r, ContentLength: aws.Int64(size),
		IfNoneMatch: aws.String("*"), ChecksumAlgorithm: types.ChecksumAlgorithmSha256, ChecksumSHA256: aws.String(sum),
	})
	if err != nil && !isCode(err, "PreconditionFailed") {
		return fmt.Errorf("cas: put %s: %w", key, err)
	}
	return nil
}

// Open streams the object at key.
func (s *Store) Open(ctx context.Context, key string) (io.ReadCloser, int64, error) {
	out, err := s.client.GetObject(ctx, &s3.GetObjectInput{Bucket: &s.bucket, Key: aws.String(key)})
	if err != nil {
		if isCode(err, "NoSuchKey", "NotFound") {
			return nil, 0, ErrNotFound
		}
		return nil, 0, fmt.Errorf("cas: get %s: %w", key, err)
	}
	return out.Body, aws.ToInt64(out.ContentLength), nil
}

// Delete removes objects, up to 1,000 keys a request. Only the garbage
// collector calls it, for objects nothing references; a key that is not
// there is not an error.
func (s *Store) Delete(ctx context.Context, keys []string) error {
	for len(keys) > 0 {
		n := min(len(keys), 1000)
		ids := make([]types.ObjectIdentifier, n)
		for i, k := range keys[:n] {
			ids[i] = types.ObjectIdentifier{Key: aws.String(k)}
		}
		out, err := s.client.DeleteObjects(ctx, &s3.DeleteObjectsInput{Bucket: &s.bucket,
			Delete: &types.Delete{Objects: ids, Quiet: aws.Bool(true)}})
		if err != nil {
			return fmt.Errorf("cas: delete %d objects: %w", n, err)
		}
		for _, e := range out.Errors {
			if aws.ToString(e.Code) != "NoSuchKey" {
				return fmt.Errorf("cas: delete %s: %s %s", aws.ToString(e.Key), aws.ToString(e.Code), aws.ToString(e.Message))
			}
		}
		keys = keys[n:]
	}
	return nil
}

// PresignGet returns a short-lived URL to download the object at key.
// PresignExpiry is how long a presigned URL works.
func (s *Store) PresignExpiry() time.Duration { return s.expiry }

func (s *Store) PresignGet(ctx context.Context, key string) (string, error) {
	req, err := s.presign.PresignGetObject(ctx, &s3.GetObjectInput{Bucket: &s.bucket, Key: aws.String(key)},
		s3.WithPresignExpires(s.expiry))
	if err != nil {
		return "", fmt.Errorf("cas: presign get %s: %w", key, err)
	}
	return req.URL, nil
}

// PresignDownload is PresignGet for a person's browser: the answer says
// attachment, named filename, of type application/octet-stream, so what a
// job stored is saved, never shown inline on the bucket's origin.
func (s *Store) PresignDownload(ctx context.Context, key, filename string) (string, error) {
	disposition := "attachment; filename*=UTF-8''" + url.PathEscape(filename)
	req, err := s.presign.PresignGetObject(ctx, &s3.GetObjectInput{Bucket: &s.bucket, Key: aws.String(key),
		ResponseContentDisposition: aws.String(disposition), ResponseContentType: aws.String("application/octet-stream")},
		s3.WithPresignExpires(s.expiry))
	if err != nil {
		return "", fmt.Errorf("cas: presign download %s: %w", key, err)
	}
	return req.URL, nil
}

// Upload is a presigned PUT: the client must send exactly Headers.
type Upload struct {
	URL     string            `json:"url"`
	Method  string            `json:"method"`
	Headers map[string]string `json:"headers"`
}

// PresignPut returns a short-lived URL to upload one blob of exactly size
// bytes to key. The length, If-None-Match: * and the blob's SHA-256
// (x-amz-checksum-sha256) are signed headers: the URL cannot overwrite an
// object, and S3 refuses a body that is not the blob.
func (s *Store) PresignPut(ctx context.Context, key, digest string, size int64) (Upload, error) {
	sum, err := checksum(digest)
	if err != nil {
		return Upload{}, err
	}
	req, err := s.presign.PresignPutObject(ctx, &s3.PutObjectInput{
		Bucket: &s.bucket, Key: aws.String(key), ContentLength: aws.Int64(size), IfNoneMatch: aws.String("*"),
		ChecksumAlgorithm: types.ChecksumAlgorithmSha256, ChecksumSHA256: aws.String(sum),
	}, s3.WithPresignExpires(s.expiry))
	if err != nil {
		return Upload{}, fmt.Errorf("cas: presign put %s: %w", key, err)
	}
	headers := map[string]string{}
	for k, v := range req.SignedHeader {
		if strings.EqualFold(k, "host") || len(v) == 0 {
			continue
		}
		headers[http.CanonicalHeaderKey(k)] = v[0]
	}
	return Upload{URL: req.URL, Method: req.Method, Headers: headers}, nil
}

func isCode(err error, codes ...string) bool {
	var ae smithy.APIError
	if errors.As(err, &ae) {
		for _, c := range codes {
			if ae.ErrorCode() == c {
				return true
			}
		}
	}
	return false
}

// Object is one stored object, for audits and tests.
type Object struct {
	Key  string
	Size int64
	ETag string
}

// List returns every object in the bucket, sorted by key.
func (s *Store) List(ctx context.Context) ([]Object, error) {
	var out []Object
	p := s3.NewListObjectsV2Paginator(s.client, &s3.ListObjectsV2Input{Bucket: &s.bucket})
	for p.HasMorePages() {
		page, err := p.NextPage(ctx)
		if err != nil {
			return nil, fmt.Errorf("cas: list: %w", err)
		}
		for _, o := range page.Contents {
			out = append(out, Object{Key: aws.ToString(o.Key), Size: aws.ToInt64(o.Size), ETag: aws.ToString(o.ETag)})
		}
	}
	return out, nil
}
