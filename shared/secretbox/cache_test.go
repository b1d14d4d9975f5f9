package secretbox

import (
	"bytes"
	"context"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/forgeci/forgeci/shared/secretbox/fakekms"
)

// countingKeyring counts Decrypt calls reaching the keyring under it.
type countingKeyring struct {
	Keyring
	decrypts atomic.Int64
}

func (k *countingKeyring) Decrypt(ctx context.Context, wrapped []byte) ([]byte, error) {
	k.decrypts.Add(1)
	return k.Keyring.Decrypt(ctx, wrapped)
}

// fakeClock is a clock the test moves by hand.
type fakeClock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *fakeClock) now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

func (c *fakeClock) advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.t = c.t.Add(d)
}

func setupCache(t *testing.T, ttl time.Duration) (*Cache, *countingKeyring, *fakeClock) {
	t.Helper()
	fk, _ := newFileKeyring(t)
	k := &countingKeyring{Keyring: fk}
	clock := &fakeClock{t: time.Unix(1_700_000_000, 0)}
	c := NewCache(k, ttl)
	c.now = clock.now
	return c, k, clock
}

func mustDecrypt(t *testing.T, c *Cache, wrapped, want []byte) {
	t.Helper()
	got, err := c.Decrypt(context.Background(), wrapped)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, want) {
		t.Fatal("cache returned another key")
	}
}

func TestCacheTTL(t *testing.T) {
	const ttl = time.Minute
	c, k, clock := setupCache(t, ttl)
	plain, wrapped, err := k.GenerateDataKey(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	for range 5 {
		mustDecrypt(t, c, wrapped, plain)
	}
	if n := k.decrypts.Load(); n != 1 {
		t.Fatalf("%d keyring calls for one key within ttl, want 1", n)
	}
	clock.advance(ttl - time.Nanosecond)
	mustDecrypt(t, c, wrapped, plain)
	if n := k.decrypts.Load(); n != 1 {
		t.Fatalf("%d keyring calls just before ttl, want 1", n)
	}
	clock.advance(time.Nanosecond)
	mustDecrypt(t, c, wrapped, plain)
	mustDecrypt(t, c, wrapped, plain)
	if n := k.decrypts.Load(); n != 2 {
		t.Fatalf("%d keyring calls after ttl, want 2", n)
	}

	// Another wrapped key is another entry.
	plain2, wrapped2, err := k.GenerateDataKey(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	mustDecrypt(t, c, wrapped2, plain2)
	mustDecrypt(t, c, wrapped, plain)
	if n := k.decrypts.Load(); n != 3 {
		t.Fatalf("%d keyring calls, want 3", n)
	}
}

func TestCacheReturnsCopies(t *testing.T) {
	c, k, _ := setupCache(t, time.Hour)
	plain, wrapped, err := k.GenerateDataKey(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	for range 2 {
		got, err := c.Decrypt(context.Background(), wrapped)
		if err != nil {
			t.Fatal(err)
		}
		clear(got) // a caller wiping its key must not wipe the cache's
	}
	mustDecrypt(t, c, wrapped, plain)
}

func TestCacheDoesNotKeepErrors(t *testing.T) {
	c, k, _ := setupCache(t, time.Hour)
	for range 2 {
		if _, err := c.Decrypt(context.Background(), []byte("not a wrapped key")); err == nil {
			t.Fatal("garbage unwrapped")
		}
	}
	if n := k.decrypts.Load(); n != 2 {
		t.Fatalf("%d keyring calls, want 2 (errors are not cached)", n)
	}
}

func TestCacheIsBounded(t *testing.T) {
	c, k, _ := setupCache(t, time.Hour)
	ctx := context.Background()
	wrapped := make([][]byte, cacheMax+1)
	plain := make([][]byte, cacheMax+1)
	for i := range wrapped {
		var err error
		plain[i], wrapped[i], err = k.GenerateDataKey(ctx)
		if err != nil {
			t.Fatal(err)
		}
		mustDecrypt(t, c, wrapped[i], plain[i])
	}
	if len(c.entries) != cacheMax {
		t.Fatalf("cache holds %d entries, want %d", len(c.entries), cacheMax)
	}
	before := k.decrypts.Load()
	mustDecrypt(t, c, wrapped[cacheMax], plain[cacheMax]) // newest: still there
	mustDecrypt(t, c, wrapped[1], plain[1])               // second oldest: still there
	if n := k.decrypts.Load() - before; n != 0 {
		t.Fatalf("%d keyring calls for cached keys, want 0", n)
	}
	mustDecrypt(t, c, wrapped[0], plain[0]) // oldest: evicted
	if n := k.decrypts.Load() - before; n != 1 {
		t.Fatalf("%d keyring calls for the evicted key, want 1", n)
	}
}

// TestCacheConcurrent runs under -race: many goroutines, a few keys. Each
// goroutine can miss each key at most once (after its own miss the key is
// cached), which bounds the keyring calls.
func TestCacheConcurrent(t *testing.T) {
	const goroutines, keys, rounds = 8, 4, 100
	fk, _ := newFileKeyring(t)
	k := &countingKeyring{Keyring: fk}
	c := NewCache(k, time.Hour)
	plain := make([][]byte, keys)
	wrapped := make([][]byte, keys)
	for i := range keys {
		var err error
		if plain[i], wrapped[i], err = k.GenerateDataKey(context.Background()); err != nil {
			t.Fatal(err)
		}
	}
	var wg sync.WaitGroup
	var bad atomic.Int64
	for g := range goroutines {
		wg.Go(func() {
			for r := range rounds {
				i := (g + r) % keys
				got, err := c.Decrypt(context.Background(), wrapped[i])
				if err != nil || !bytes.Equal(got, plain[i]) {
					bad.Add(1)
				}
			}
		})
	}
	wg.Wait()
	if bad.Load() != 0 {
		t.Fatalf("%d wrong or failed decrypts", bad.Load())
	}
	if n := k.decrypts.Load(); n < keys || n > goroutines*keys {
		t.Fatalf("%d keyring calls, want between %d and %d", n, keys, goroutines*keys)
	}
}

// TestCacheOverKMS is the point of the cache: repeated unwraps of one
// project key reach KMS once.
func TestCacheOverKMS(t *testing.T) {
	k, fake, _ := setupKMS(t)
	plain, wrapped := newDataKey(t, k)
	c := NewCache(k, time.Minute)
	for range 10 {
		mustDecrypt(t, c, wrapped, plain)
	}
	if n := fake.Calls(fakekms.OpDecrypt); n != 1 {
		t.Fatalf("%d KMS Decrypt calls, want 1", n)
	}
}
