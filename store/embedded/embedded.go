// Package embedded is the default store.Store: one bbolt file under the
// broker's data directory (QUEEN_DATA_DIR, ./queen-data by default).
//
// bbolt commits copy-on-write pages and then a meta page, and fsyncs both
// before Update returns, so a write that returned survives a crash and a
// write torn by one leaves the previous state whole. The file is locked
// while open: a second broker on the same directory fails to open it
// instead of corrupting it.
//
// Layout: bucket "declarations" holds one bucket per tenant, queue name to
// options bytes; "grants" maps tenant to a JSON grant; "settings" maps key
// to value; "meta" holds the format version.
package embedded

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"sync"
	"sync/atomic"
	"time"

	"github.com/queenmq/ephemeral/store"
	bolt "go.etcd.io/bbolt"
	bolterrors "go.etcd.io/bbolt/errors"
)

// FileName is the store's file inside the data directory.
const FileName = "ephemeral.db"

const formatVersion = "1"

var (
	bucketDecls    = []byte("declarations")
	bucketGrants   = []byte("grants")
	bucketSettings = []byte("settings")
	bucketMeta     = []byte("meta")
	keyVersion     = []byte("version")
)

// Config says where the file lives.
type Config struct {
	// Dir is the data directory; it is created (0700) when missing.
	Dir string
	// LockTimeout bounds the wait for the file lock held by another
	// process (default 1 s); past it Open fails.
	LockTimeout time.Duration
}

// Store is the embedded store.Store.
type Store struct {
	db    *bolt.DB
	ready chan struct{}

	mu     sync.RWMutex // held shared by every call, exclusively by Close
	closed atomic.Bool  // written under mu; Healthy reads it without
	// rev counts committed writes since Open (Revision). Only this process
	// writes the file (it is locked), so a counter in memory is enough.
	rev atomic.Int64
}

var _ store.Store = (*Store)(nil)

// Open opens (creating when missing) the store file under cfg.Dir.
func Open(cfg Config) (*Store, error) {
	if cfg.Dir == "" {
		return nil, errors.New("embedded: empty data directory")
	}
	if cfg.LockTimeout <= 0 {
		cfg.LockTimeout = time.Second
	}
	if err := os.MkdirAll(cfg.Dir, 0o700); err != nil {
		return nil, fmt.Errorf("embedded: data directory: %w", err)
	}
	path := filepath.Join(cfg.Dir, FileName)
	db, err := bolt.Open(path, 0o600, &bolt.Options{Timeout: cfg.LockTimeout})
	if err != nil {
		if errors.Is(err, bolterrors.ErrTimeout) {
			return nil, fmt.Errorf("embedded: %s is locked by another process: %w", path, err)
		}
		return nil, fmt.Errorf("embedded: open %s: %w", path, err)
	}
	err = db.Update(func(tx *bolt.Tx) error {
		for _, b := range [][]byte{bucketDecls, bucketGrants, bucketSettings, bucketMeta} {
			if _, err := tx.CreateBucketIfNotExists(b); err != nil {
				return err
			}
		}
		meta := tx.Bucket(bucketMeta)
		switch v := meta.Get(keyVersion); {
		case v == nil:
			return meta.Put(keyVersion, []byte(formatVersion))
		case string(v) != formatVersion:
			return fmt.Errorf("format version %q, this build reads %q", v, formatVersion)
		}
		return nil
	})
	if err != nil {
		db.Close()
		return nil, fmt.Errorf("embedded: initialise %s: %w", path, err)
	}
	s := &Store{db: db, ready: make(chan struct{})}
	close(s.ready)
	return s, nil
}

// Path is the file the store uses.
func (s *Store) Path() string { return s.db.Path() }

// Ready is closed from Open on.
func (s *Store) Ready() <-chan struct{} { return s.ready }

// Healthy is true until Close. It takes no lock.
func (s *Store) Healthy() bool { return !s.closed.Load() }

// Close releases the file. It is safe to call more than once.
func (s *Store) Close() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed.Swap(true) {
		return nil
	}
	return s.db.Close()
}

// view and update run fn under the read lock of s.mu, so Close waits for
// calls in flight and calls after it fail with store.ErrClosed.
func (s *Store) view(ctx context.Context, fn func(*bolt.Tx) error) error {
	return s.run(ctx, false, fn)
}

func (s *Store) update(ctx context.Context, fn func(*bolt.Tx) error) error {
	return s.run(ctx, true, fn)
}

func (s *Store) run(ctx context.Context, write bool, fn func(*bolt.Tx) error) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	s.mu.RLock()
	defer s.mu.RUnlock()
	if s.closed.Load() {
		return store.ErrClosed
	}
	if write {
		err := s.db.Update(fn)
		if err == nil {
			s.rev.Add(1)
		}
		return err
	}
	return s.db.View(fn)
}

// LoadDeclarations returns every declaration, by tenant then queue.
func (s *Store) LoadDeclarations(ctx context.Context) ([]store.Declaration, error) {
	var out []store.Declaration
	err := s.view(ctx, func(tx *bolt.Tx) error {
		return tx.Bucket(bucketDecls).ForEachBucket(func(tenant []byte) error {
			t := string(tenant)
			return tx.Bucket(bucketDecls).Bucket(tenant).ForEach(func(q, opts []byte) error {
				// bbolt's bytes live in its mmap only during the transaction.
				out = append(out, store.Declaration{Tenant: t, Queue: string(q), Options: bytes.Clone(opts)})
				return nil
			})
		})
	})
	if err != nil {
		return nil, err
	}
	// bbolt iterates in byte order already; sort to make the contract
	// independent of that.
	sort.Slice(out, func(i, j int) bool {
		if out[i].Tenant != out[j].Tenant {
			return out[i].Tenant < out[j].Tenant
		}
		return out[i].Queue < out[j].Queue
	})
	return out, nil
}

// PutDeclaration creates or replaces a declaration.
func (s *Store) PutDeclaration(ctx context.Context, d store.Declaration) error {
	if err := d.Validate(); err != nil {
		return err
	}
	return s.update(ctx, func(tx *bolt.Tx) error {
		b, err := tx.Bucket(bucketDecls).CreateBucketIfNotExists([]byte(d.Tenant))
		if err != nil {
			return err
		}
		return b.Put([]byte(d.Queue), d.Options)
	})
}

// DeleteDeclaration removes a declaration, reporting whether it existed.
func (s *Store) DeleteDeclaration(ctx context.Context, tenant, queue string) (bool, error) {
	if err := store.ValidateName("tenant", tenant); err != nil {
		return false, err
	}
	if err := store.ValidateName("queue", queue); err != nil {
		return false, err
	}
	var existed bool
	err := s.update(ctx, func(tx *bolt.Tx) error {
		existed = false
		decls := tx.Bucket(bucketDecls)
		b := decls.Bucket([]byte(tenant))
		if b == nil || b.Get([]byte(queue)) == nil {
			return nil
		}
		existed = true
		if err := b.Delete([]byte(queue)); err != nil {
			return err
		}
		if k, _ := b.Cursor().First(); k == nil {
			return decls.DeleteBucket([]byte(tenant))
		}
		return nil
	})
	return existed && err == nil, err
}

// grantJSON is how a grant is kept: self-describing, so a later field is
// added without a format change.
type grantJSON struct {
	MaxBytes          int64 `json:"maxBytes"`
	MaxQueues         int64 `json:"maxQueues"`
	MessagesPerSecond int64 `json:"messagesPerSecond"`
}

func decodeGrant(tenant string, v []byte) (store.Grant, error) {
	var g grantJSON
	if err := json.Unmarshal(v, &g); err != nil {
		return store.Grant{}, fmt.Errorf("embedded: grant of %q: %w", tenant, err)
	}
	return store.Grant{Tenant: tenant, MaxBytes: g.MaxBytes, MaxQueues: g.MaxQueues, MessagesPerSecond: g.MessagesPerSecond}, nil
}

// LoadGrants returns every grant, by tenant.
func (s *Store) LoadGrants(ctx context.Context) ([]store.Grant, error) {
	var out []store.Grant
	err := s.view(ctx, func(tx *bolt.Tx) error {
		return tx.Bucket(bucketGrants).ForEach(func(k, v []byte) error {
			g, err := decodeGrant(string(k), v)
			out = append(out, g)
			return err
		})
	})
	if err != nil {
		return nil, err
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Tenant < out[j].Tenant })
	return out, nil
}

// GetGrant reads one tenant's grant.
func (s *Store) GetGrant(ctx context.Context, tenant string) (store.Grant, bool, error) {
	if err := store.ValidateName("tenant", tenant); err != nil {
		return store.Grant{}, false, err
	}
	var (
		g     store.Grant
		found bool
	)
	err := s.view(ctx, func(tx *bolt.Tx) error {
		v := tx.Bucket(bucketGrants).Get([]byte(tenant))
		if v == nil {
			return nil
		}
		var err error
		g, err = decodeGrant(tenant, v)
		found = err == nil
		return err
	})
	return g, found, err
}

// PutGrant creates or replaces a tenant's grant.
func (s *Store) PutGrant(ctx context.Context, g store.Grant) error {
	if err := g.Validate(); err != nil {
		return err
	}
	v, err := json.Marshal(grantJSON{MaxBytes: g.MaxBytes, MaxQueues: g.MaxQueues, MessagesPerSecond: g.MessagesPerSecond})
	if err != nil {
		return err
	}
	return s.update(ctx, func(tx *bolt.Tx) error {
		return tx.Bucket(bucketGrants).Put([]byte(g.Tenant), v)
	})
}

// DeleteGrant removes a tenant's grant, reporting whether it existed.
func (s *Store) DeleteGrant(ctx context.Context, tenant string) (bool, error) {
	if err := store.ValidateName("tenant", tenant); err != nil {
		return false, err
	}
	var existed bool
	err := s.update(ctx, func(tx *bolt.Tx) error {
		b := tx.Bucket(bucketGrants)
		existed = b.Get([]byte(tenant)) != nil
		if !existed {
			return nil
		}
		return b.Delete([]byte(tenant))
	})
	return existed && err == nil, err
}

// GetSetting reads a setting.
func (s *Store) GetSetting(ctx context.Context, key string) ([]byte, bool, error) {
	if err := store.ValidateKey(key); err != nil {
		return nil, false, err
	}
	var (
		v     []byte
		found bool
	)
	err := s.view(ctx, func(tx *bolt.Tx) error {
		if raw := tx.Bucket(bucketSettings).Get([]byte(key)); raw != nil {
			v, found = append([]byte{}, raw...), true
		}
		return nil
	})
	return v, found, err
}

// PutSetting creates or replaces a setting.
func (s *Store) PutSetting(ctx context.Context, key string, value []byte) error {
	if err := store.ValidateKey(key); err != nil {
		return err
	}
	if value == nil {
		value = []byte{} // bbolt refuses a nil value
	}
	return s.update(ctx, func(tx *bolt.Tx) error {
		return tx.Bucket(bucketSettings).Put([]byte(key), value)
	})
}

// Revision counts the writes committed since Open: only this process can
// write the file, so nothing else can change it.
func (s *Store) Revision(ctx context.Context) (int64, error) {
	if err := ctx.Err(); err != nil {
		return 0, err
	}
	if s.closed.Load() {
		return 0, store.ErrClosed
	}
	return s.rev.Load(), nil
}

// Changes is nil: the file is locked by this process, so no other writer
// exists to be told about.
func (s *Store) Changes() <-chan struct{} { return nil }
