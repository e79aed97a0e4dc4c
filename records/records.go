package records

import (
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"time"

	bolt "go.etcd.io/bbolt"
	"golang.org/x/sys/unix"
)

var (
	bucketMachines = []byte("machines")
	bucketProbes   = []byte("probes")
	bucketRuns     = []byte("runs")
	bucketEvents   = []byte("events")

	allBuckets = [][]byte{bucketMachines, bucketProbes, bucketRuns, bucketEvents}
)

// ErrNotFound is returned when a named machine, record or run does not exist.
var ErrNotFound = errors.New("not found")

// lockTimeout bounds how long one operation waits for another process's write.
// Writers hold the file only for one transaction, so this is a safety net.
const lockTimeout = 10 * time.Second

// Store is the records file. It does not keep the file open between operations:
// every operation opens, runs one transaction and closes, so several postern
// processes (a run writing its events, `runs list` reading) share one file and a
// reader never stalls a run for longer than one transaction.
type Store struct {
	path string
	mu   sync.Mutex // one open handle per process at a time: flock is per open file
}

// DefaultPath is $POSTERN_HOME/records.db, else $XDG_STATE_HOME/postern/records.db,
// else ~/.local/state/postern/records.db.
func DefaultPath() (string, error) {
	if h := os.Getenv("POSTERN_HOME"); h != "" {
		return filepath.Join(h, "records.db"), nil
	}
	if x := os.Getenv("XDG_STATE_HOME"); x != "" {
		return filepath.Join(x, "postern", "records.db"), nil
	}
	home, err := os.UserHomeDir()
	if err != nil {
		return "", fmt.Errorf("find home for records (set POSTERN_HOME): %w", err)
	}
	return filepath.Join(home, ".local", "state", "postern", "records.db"), nil
}

// Open prepares the records file at path, creating it and its buckets if needed.
func Open(path string) (*Store, error) {
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		return nil, fmt.Errorf("create records directory %q: %w", filepath.Dir(path), err)
	}
	s := &Store{path: path}
	// Only a new or older file needs its buckets made; checking costs no fsync,
	// which matters on every 'postern run'.
	ready := false
	if _, err := os.Stat(path); err == nil {
		err := s.view(func(tx *bolt.Tx) error {
			ready = true
			for _, b := range allBuckets {
				ready = ready && tx.Bucket(b) != nil
			}
			return nil
		})
		if err != nil {
			return nil, err
		}
	}
	if ready {
		return s, nil
	}
	err := s.update(func(tx *bolt.Tx) error {
		for _, b := range allBuckets {
			if _, err := tx.CreateBucketIfNotExists(b); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	return s, nil
}

// Path is the records file's path.
func (s *Store) Path() string { return s.path }

func (s *Store) open(readOnly bool) (*bolt.DB, error) {
	db, err := bolt.Open(s.path, 0o600, &bolt.Options{Timeout: lockTimeout, ReadOnly: readOnly})
	if err != nil {
		return nil, fmt.Errorf("open records %q: %w", s.path, err)
	}
	return db, nil
}

// update runs fn in one durable write transaction: when it returns nil the data is
// on disk (bbolt fsyncs on commit).
func (s *Store) update(fn func(*bolt.Tx) error) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	release, err := s.turn(unix.LOCK_EX)
	if err != nil {
		return err
	}
	defer release()
	db, err := s.open(false)
	if err != nil {
		return err
	}
	err = db.Update(fn)
	if cerr := db.Close(); err == nil && cerr != nil {
		err = fmt.Errorf("close records %q: %w", s.path, cerr)
	}
	return err
}

func (s *Store) view(fn func(*bolt.Tx) error) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	// Take a turn and give it back at once: a writer waiting for its turn holds
	// back new readers, so readers in a loop cannot starve a run's writes. Readers
	// already reading finish their one transaction first.
	release, err := s.turn(unix.LOCK_SH)
	if err != nil {
		return err
	}
	release()
	db, err := s.open(true)
	if err != nil {
		return err
	}
	err = db.View(fn)
	if cerr := db.Close(); err == nil && cerr != nil {
		err = fmt.Errorf("close records %q: %w", s.path, cerr)
	}
	return err
}

// turn takes the queue lock beside the records file (a blocking flock, so waiters
// are woken in turn rather than polling) and returns its release.
func (s *Store) turn(how int) (func(), error) {
	f, err := os.OpenFile(s.path+".turn", os.O_RDWR|os.O_CREATE|unix.O_CLOEXEC, 0o600)
	if err != nil {
		return nil, fmt.Errorf("open records lock %q: %w", s.path+".turn", err)
	}
	for {
		err = unix.Flock(int(f.Fd()), how)
		if err != unix.EINTR {
			break
		}
	}
	if err != nil {
		f.Close()
		return nil, fmt.Errorf("lock records %q: %w", s.path+".turn", err)
	}
	return func() { f.Close() }, nil
}

func putJSON(tx *bolt.Tx, bucket []byte, key string, v any) error {
	b, err := json.Marshal(v)
	if err != nil {
		return fmt.Errorf("encode %s/%s: %w", bucket, key, err)
	}
	return tx.Bucket(bucket).Put([]byte(key), b)
}

func getJSON(tx *bolt.Tx, bucket []byte, key string, v any) error {
	b := tx.Bucket(bucket).Get([]byte(key))
	if b == nil {
		return fmt.Errorf("%s %q: %w", bucket, key, ErrNotFound)
	}
	if err := json.Unmarshal(b, v); err != nil {
		return fmt.Errorf("decode %s/%s: %w", bucket, key, err)
	}
	return nil
}

func seqKey(n uint64) []byte {
	var k [8]byte
	binary.BigEndian.PutUint64(k[:], n)
	return k[:]
}
