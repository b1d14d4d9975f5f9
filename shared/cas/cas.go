// Package cas is ForgeCI's content-addressed store on S3: sources,
// artifacts and caches are immutable blobs under the key sha256/<hex>,
// created only with If-None-Match: * and moved by presigned URLs so that
// large bytes never pass through Lambda.
package cas

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net/http"
	"regexp"
	"strings"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	"github.com/aws/smithy-go"
	"github.com/forgeci/forgeci/shared/awsenv"
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

var digestRE = regexp.MustCompile(`^sha256:[0-9a-f]{64}$`)

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
		// Checksums are ours (SHA-256 digests checked by reading back);
		// only send the SDK's when an operation requires one, so presigned
		// URLs stay usable by plain HTTP clients.
		o.RequestChecksumCalculation = aws.RequestChecksumCalculationWhenRequired
		o.ResponseChecksumValidation = aws.ResponseChecksumValidationWhenRequired
	})
	return &Store{client: client, presign: s3.NewPresignClient(client), bucket: cfg.Bucket, expiry: cfg.PresignExpiry}, nil
}

// Key returns the object key of a digest.
func Key(digest string) string { return "sha256/" + strings.TrimPrefix(digest, "sha256:") }

// ValidDigest reports whether d is "sha256:<64 lowercase hex>".
func ValidDigest(d string) bool { return digestRE.MatchString(d) }

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

// Stat returns the size of the blob, or ErrNotFound.
func (s *Store) Stat(ctx context.Context, digest string) (int64, error) {
	out, err := s.client.HeadObject(ctx, &s3.HeadObjectInput{Bucket: &s.bucket, Key: aws.String(Key(digest))})
	if err != nil {
		if isCode(err, "NotFound", "NoSuchKey") {
			return 0, ErrNotFound
		}
		return 0, fmt.Errorf("cas: stat %s: %w", digest, err)
	}
	return aws.ToInt64(out.ContentLength), nil
}

// Put stores size bytes from r under digest, streaming, without checking
// them (Verify does that). An existing blob is left alone: blobs are
// immutable, so the same digest means the same bytes once verified.
func (s *Store) Put(ctx context.Context, digest string, r io.Reader, size int64) error {
	if !ValidDigest(digest) {
		return fmt.Errorf("cas: invalid digest %q", digest)
	}
	_, err := s.client.PutObject(ctx, &s3.PutObjectInput{
		Bucket: &s.bucket, Key: aws.String(Key(digest)), Body: r, ContentLength: aws.Int64(size),
		IfNoneMatch: aws.String("*"),
	})
	if err != nil && !isCode(err, "PreconditionFailed") {
		return fmt.Errorf("cas: put %s: %w", digest, err)
	}
	return nil
}

// Open streams a blob.
func (s *Store) Open(ctx context.Context, digest string) (io.ReadCloser, int64, error) {
	out, err := s.client.GetObject(ctx, &s3.GetObjectInput{Bucket: &s.bucket, Key: aws.String(Key(digest))})
	if err != nil {
		if isCode(err, "NoSuchKey", "NotFound") {
			return nil, 0, ErrNotFound
		}
		return nil, 0, fmt.Errorf("cas: get %s: %w", digest, err)
	}
	return out.Body, aws.ToInt64(out.ContentLength), nil
}

// Verify reads the blob back and checks its size and SHA-256. A blob that
// does not match is deleted, so that a correct upload can take its key:
// nothing has referenced it yet, because references are made only after
// Verify succeeds.
func (s *Store) Verify(ctx context.Context, digest string, size int64) error {
	body, n, err := s.Open(ctx, digest)
	if err != nil {
		return err
	}
	defer body.Close()
	if n != size {
		s.remove(ctx, digest)
		return fmt.Errorf("%w: %s is %d bytes, expected %d", ErrMismatch, digest, n, size)
	}
	h := sha256.New()
	read, err := io.Copy(h, io.LimitReader(body, size+1))
	if err != nil {
		return fmt.Errorf("cas: read %s: %w", digest, err)
	}
	if got := "sha256:" + hex.EncodeToString(h.Sum(nil)); read != size || got != digest {
		s.remove(ctx, digest)
		return fmt.Errorf("%w: %s holds %d bytes hashing to %s", ErrMismatch, digest, read, got)
	}
	return nil
}

func (s *Store) remove(ctx context.Context, digest string) {
	_, _ = s.client.DeleteObject(ctx, &s3.DeleteObjectInput{Bucket: &s.bucket, Key: aws.String(Key(digest))})
}

// PresignGet returns a short-lived URL to download a blob.
func (s *Store) PresignGet(ctx context.Context, digest string) (string, error) {
	req, err := s.presign.PresignGetObject(ctx, &s3.GetObjectInput{Bucket: &s.bucket, Key: aws.String(Key(digest))},
		s3.WithPresignExpires(s.expiry))
	if err != nil {
		return "", fmt.Errorf("cas: presign get %s: %w", digest, err)
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
// bytes. If-None-Match: * is a signed header, so the URL cannot overwrite
// an existing blob.
func (s *Store) PresignPut(ctx context.Context, digest string, size int64) (Upload, error) {
	req, err := s.presign.PresignPutObject(ctx, &s3.PutObjectInput{
		Bucket: &s.bucket, Key: aws.String(Key(digest)), ContentLength: aws.Int64(size), IfNoneMatch: aws.String("*"),
	}, s3.WithPresignExpires(s.expiry))
	if err != nil {
		return Upload{}, fmt.Errorf("cas: presign put %s: %w", digest, err)
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
