package catalog

import (
	"bytes"
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"time"

	bolt "go.etcd.io/bbolt"
	bolterrors "go.etcd.io/bbolt/errors"
)

// The embedded catalog: one bbolt file (FileName) under the data
// directory, locked while open like the broker's store/embedded, so that a
// second gateway on the same directory fails to open it instead of
// corrupting it. A write that returned nil has been fsynced.
//
// Layout: "plans" maps a name to the plan as JSON; "tenants" maps a name to
// {"plan":...}; "usage" maps minute (8 bytes, big-endian) + tenant + NUL +
// class to the count (8 bytes, big-endian), minute first so that
// UsageSince seeks to its first minute instead of reading every row (names
// hold no NUL: checkName); "meta" holds the format version and the
// revision (8 bytes), kept in the file so that it never goes back.

const embeddedFormat = "1"

var (
	bucketPlans   = []byte("plans")
	bucketTenants = []byte("tenants")
	bucketUsage   = []byte("usage")
	bucketMeta    = []byte("meta")
	keyVersion    = []byte("version")
	keyRevision   = []byte("revision")
)

// lockTimeout bounds the wait for a file held by another process.
const lockTimeout = time.Second

var _ Store = (*embedded)(nil)

type embedded struct {
	db     *bolt.DB
	mu     sync.RWMutex // held shared by every call, exclusively by Close
	closed atomic.Bool  // written under mu
}

func openEmbedded(path string) (*embedded, error) {
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		return nil, fmt.Errorf("catalog: data directory: %w", err)
	}
	db, err := bolt.Open(path, 0o600, &bolt.Options{Timeout: lockTimeout})
	if err != nil {
		if errors.Is(err, bolterrors.ErrTimeout) {
			return nil, fmt.Errorf("catalog: %s is locked by another process: %w", path, err)
		}
		return nil, fmt.Errorf("catalog: open %s: %w", path, err)
	}
	err = db.Update(func(tx *bolt.Tx) error {
		for _, b := range [][]byte{bucketPlans, bucketTenants, bucketUsage, bucketMeta} {
			if _, err := tx.CreateBucketIfNotExists(b); err != nil {
				return err
			}
		}
		meta := tx.Bucket(bucketMeta)
		switch v := meta.Get(keyVersion); {
		case v == nil:
			if err := meta.Put(keyRevision, u64(1)); err != nil {
				return err
			}
			return meta.Put(keyVersion, []byte(embeddedFormat))
		case string(v) != embeddedFormat:
			return fmt.Errorf("format version %q, this build reads %q", v, embeddedFormat)
		}
		return nil
	})
	if err != nil {
		db.Close()
		return nil, fmt.Errorf("catalog: initialise %s: %w", path, err)
	}
	return &embedded{db: db}, nil
}

func u64(n int64) []byte { return binary.BigEndian.AppendUint64(nil, uint64(n)) }

func fromU64(b []byte) int64 {
	if len(b) != 8 {
		return 0
	}
	return int64(binary.BigEndian.Uint64(b))
}

func (s *embedded) Close() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed.Swap(true) {
		return nil
	}
	return s.db.Close()
}

// run runs fn in a transaction under the read lock of s.mu, so that Close
// waits for calls in flight and calls after it fail with ErrClosed. A
// catalog write (bump) also raises the revision, in the same transaction.
func (s *embedded) run(ctx context.Context, write, bump bool, fn func(*bolt.Tx) error) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	s.mu.RLock()
	defer s.mu.RUnlock()
	if s.closed.Load() {
		return ErrClosed
	}
	if !write {
		return s.db.View(fn)
	}
	return s.db.Update(func(tx *bolt.Tx) error {
		if err := fn(tx); err != nil {
			return err
		}
		if !bump {
			return nil
		}
		meta := tx.Bucket(bucketMeta)
		return meta.Put(keyRevision, u64(fromU64(meta.Get(keyRevision))+1))
	})
}

func (s *embedded) PutPlan(ctx context.Context, p Plan) error {
	if err := p.Validate(); err != nil {
		return err
	}
	v, err := json.Marshal(p)
	if err != nil {
		return err
	}
	return s.run(ctx, true, true, func(tx *bolt.Tx) error {
		return tx.Bucket(bucketPlans).Put([]byte(p.Name), v)
	})
}

func (s *embedded) GetPlan(ctx context.Context, name string) (Plan, bool, error) {
	if err := checkName("plan name", name); err != nil {
		return Plan{}, false, err
	}
	var (
		p     Plan
		found bool
	)
	err := s.run(ctx, false, false, func(tx *bolt.Tx) error {
		v := tx.Bucket(bucketPlans).Get([]byte(name))
		if v == nil {
			return nil
		}
		found = true
		return decodeStored(name, v, &p)
	})
	return p, found && err == nil, err
}

func (s *embedded) DeletePlan(ctx context.Context, name string) (bool, error) {
	if err := checkName("plan name", name); err != nil {
		return false, err
	}
	var existed bool
	err := s.run(ctx, true, true, func(tx *bolt.Tx) error {
		b := tx.Bucket(bucketPlans)
		existed = b.Get([]byte(name)) != nil
		return b.Delete([]byte(name))
	})
	return existed && err == nil, err
}

func (s *embedded) PutTenant(ctx context.Context, t Tenant) error {
	if err := t.Validate(); err != nil {
		return err
	}
	v, err := json.Marshal(t)
	if err != nil {
		return err
	}
	return s.run(ctx, true, true, func(tx *bolt.Tx) error {
		return tx.Bucket(bucketTenants).Put([]byte(t.Name), v)
	})
}

func (s *embedded) GetTenant(ctx context.Context, name string) (Tenant, bool, error) {
	if err := checkName("tenant name", name); err != nil {
		return Tenant{}, false, err
	}
	var (
		t     Tenant
		found bool
	)
	err := s.run(ctx, false, false, func(tx *bolt.Tx) error {
		v := tx.Bucket(bucketTenants).Get([]byte(name))
		if v == nil {
			return nil
		}
		found = true
		return decodeStored(name, v, &t)
	})
	return t, found && err == nil, err
}

// decodeStored reads a stored plan or tenant. The key is the name: the
// value's own name field is overwritten with it.
func decodeStored[T Plan | Tenant](name string, v []byte, dst *T) error {
	if err := json.Unmarshal(v, dst); err != nil {
		return fmt.Errorf("catalog: stored %q: %w", name, err)
	}
	switch d := any(dst).(type) {
	case *Plan:
		d.Name = name
	case *Tenant:
		d.Name = name
	}
	return nil
}

// Snapshot reads both buckets in one read transaction; bbolt iterates in
// byte order, which is the contract's order.
func (s *embedded) Snapshot(ctx context.Context) ([]Plan, []Tenant, error) {
	var (
		plans   []Plan
		tenants []Tenant
	)
	err := s.run(ctx, false, false, func(tx *bolt.Tx) error {
		err := tx.Bucket(bucketPlans).ForEach(func(k, v []byte) error {
			var p Plan
			err := decodeStored(string(k), v, &p)
			plans = append(plans, p)
			return err
		})
		if err != nil {
			return err
		}
		return tx.Bucket(bucketTenants).ForEach(func(k, v []byte) error {
			var t Tenant
			err := decodeStored(string(k), v, &t)
			tenants = append(tenants, t)
			return err
		})
	})
	if err != nil {
		return nil, nil, err
	}
	return plans, tenants, nil
}

func (s *embedded) Revision(ctx context.Context) (int64, error) {
	var n int64
	err := s.run(ctx, false, false, func(tx *bolt.Tx) error {
		n = fromU64(tx.Bucket(bucketMeta).Get(keyRevision))
		return nil
	})
	return n, err
}

func usageKeyBytes(u Usage) []byte {
	k := make([]byte, 0, 8+len(u.Tenant)+1+len(u.Class))
	k = binary.BigEndian.AppendUint64(k, uint64(u.Minute))
	k = append(k, u.Tenant...)
	k = append(k, 0)
	return append(k, u.Class...)
}

func (s *embedded) AddUsage(ctx context.Context, rows []Usage) error {
	rows, err := mergeUsage(rows)
	if err != nil || len(rows) == 0 {
		return err
	}
	return s.run(ctx, true, false, func(tx *bolt.Tx) error {
		b := tx.Bucket(bucketUsage)
		for _, u := range rows {
			k := usageKeyBytes(u)
			if err := b.Put(k, u64(fromU64(b.Get(k))+u.Count)); err != nil {
				return err
			}
		}
		return nil
	})
}

func (s *embedded) UsageSince(ctx context.Context, since int64) (map[string]map[Class]int64, error) {
	out := make(map[string]map[Class]int64)
	err := s.run(ctx, false, false, func(tx *bolt.Tx) error {
		c := tx.Bucket(bucketUsage).Cursor()
		// Minutes are never negative, so a negative since reads them all.
		for k, v := c.Seek(u64(max(since, 0))); k != nil; k, v = c.Next() {
			if len(k) < 8 {
				return fmt.Errorf("catalog: malformed usage key %q", k)
			}
			tenant, class, ok := bytes.Cut(k[8:], []byte{0})
			if !ok {
				return fmt.Errorf("catalog: malformed usage key %q", k)
			}
			m := out[string(tenant)]
			if m == nil {
				m = make(map[Class]int64)
				out[string(tenant)] = m
			}
			m[Class(class)] += fromU64(v)
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	return out, nil
}
