package secretbox

import (
	"bytes"
	"context"
	"crypto/sha256"
	"sync"
	"time"
)

// cacheMax bounds the cache: more project keys than this in one container
// means the oldest are unwrapped again, which costs a KMS call, not
// correctness.
const cacheMax = 1024

// Cache unwraps data keys through a Keyring and keeps each for ttl, keyed by
// the SHA-256 of the wrapped bytes, so a warm Lambda container calls KMS
// once per project key rather than once per request. It is safe for
// concurrent use.
//
// Errors are not cached: a KMS blip must not outlive the request that saw
// it. Two concurrent misses for the same key both call the keyring; a
// Lambda container serves one request at a time, so coalescing them would
// add code for no saving.
type Cache struct {
	k   Keyring
	ttl time.Duration
	now func() time.Time // replaced in tests

	mu      sync.Mutex
	entries map[[sha256.Size]byte]cacheEntry
	seq     uint64 // insertion counter: the smallest seq is the oldest
}

type cacheEntry struct {
	key     []byte
	expires time.Time
	seq     uint64
}

// NewCache returns a cache over k keeping unwrapped keys for ttl.
func NewCache(k Keyring, ttl time.Duration) *Cache {
	return &Cache{k: k, ttl: ttl, now: time.Now, entries: map[[sha256.Size]byte]cacheEntry{}}
}

// Decrypt returns the unwrapped data key, from the cache when it holds an
// unexpired copy, else from the keyring. The caller owns the returned
// slice.
func (c *Cache) Decrypt(ctx context.Context, wrapped []byte) ([]byte, error) {
	h := sha256.Sum256(wrapped)
	c.mu.Lock()
	e, ok := c.entries[h]
	if ok && c.now().Before(e.expires) {
		c.mu.Unlock()
		return bytes.Clone(e.key), nil
	}
	c.mu.Unlock()

	key, err := c.k.Decrypt(ctx, wrapped)
	if err != nil {
		return nil, err
	}

	c.mu.Lock()
	defer c.mu.Unlock()
	if _, ok := c.entries[h]; !ok && len(c.entries) >= cacheMax {
		c.evictOldest()
	}
	c.seq++
	c.entries[h] = cacheEntry{key: bytes.Clone(key), expires: c.now().Add(c.ttl), seq: c.seq}
	return key, nil
}

// evictOldest drops the entry inserted first. A scan is fine at this size,
// and only a full cache pays it.
func (c *Cache) evictOldest() {
	var oldest [sha256.Size]byte
	var oldestSeq uint64
	first := true
	for h, e := range c.entries {
		if first || e.seq < oldestSeq {
			oldest, oldestSeq, first = h, e.seq, false
		}
	}
	delete(c.entries, oldest)
}
