package cas

import (
	"bytes"
	"context"
	"fmt"
	"io"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/s3"
)

// Notes are small mutable objects beside the blobs (the wake-up hints of
// package wake), under their own prefix: unlike blobs, a note may be
// overwritten, and none is ever read by a runner.

// PutNote writes body at key, replacing what was there.
func (s *Store) PutNote(ctx context.Context, key string, body []byte) error {
	_, err := s.client.PutObject(ctx, &s3.PutObjectInput{Bucket: &s.bucket, Key: aws.String(key),
		Body: bytes.NewReader(body), ContentLength: aws.Int64(int64(len(body)))})
	if err != nil {
		return fmt.Errorf("cas: put note %s: %w", key, err)
	}
	return nil
}

// GetNote reads the note at key, at most max bytes, or ErrNotFound.
func (s *Store) GetNote(ctx context.Context, key string, max int64) ([]byte, error) {
	r, _, err := s.Open(ctx, key)
	if err != nil {
		return nil, err
	}
	defer r.Close()
	b, err := io.ReadAll(io.LimitReader(r, max+1))
	if err != nil {
		return nil, fmt.Errorf("cas: read note %s: %w", key, err)
	}
	if int64(len(b)) > max {
		return nil, fmt.Errorf("cas: note %s is over %d bytes", key, max)
	}
	return b, nil
}

// ListNotes returns up to max keys under prefix, in key order.
func (s *Store) ListNotes(ctx context.Context, prefix string, max int) ([]string, error) {
	out, err := s.client.ListObjectsV2(ctx, &s3.ListObjectsV2Input{Bucket: &s.bucket, Prefix: aws.String(prefix),
		MaxKeys: aws.Int32(int32(max))})
	if err != nil {
		return nil, fmt.Errorf("cas: list %s: %w", prefix, err)
	}
	keys := make([]string, 0, len(out.Contents))
	for _, o := range out.Contents {
		keys = append(keys, aws.ToString(o.Key))
	}
	return keys, nil
}
