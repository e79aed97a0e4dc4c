package records

import (
	"bytes"
	"cmp"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"runtime/debug"
	"slices"
	"sync"
	"syscall"
	"time"

	bolt "go.etcd.io/bbolt"
	berrors "go.etcd.io/bbolt/errors"
	"golang.org/x/sys/unix"
)

var (
	bucketMachines = []byte("machines")
	bucketProbes   = []byte("probes")
	bucketRuns     = []byte("runs")
	bucketEvents   = []byte("events")
	bucketAgents   = []byte("agents")

	allBuckets = [][]byte{bucketMachines, bucketProbes, bucketRuns, bucketEvents, bucketAgents}
	// firstBuckets are those every store has had since the first: a store
	// without one is damaged, not older.
	firstBuckets = [][]byte{bucketMachines, bucketProbes, bucketRuns, bucketEvents}
)

// ErrNotFound is returned when a named machine, record or run does not exist.
var ErrNotFound = errors.New("not found")

// lockTimeout bounds how long one operation waits for another process: first
// for its turn (see turn), then for the file itself. Writers hold the file only
// for one transaction, so this is a safety net that turns a stuck holder into
// an error naming it.
const lockTimeout = 10 * time.Second

// Store is the records file. It does not keep the file open between operations:
// every operation opens, runs one transaction and closes, so several postern
// processes (a run writing its events, `runs list` reading) share one file and a
// reader never stalls a run for longer than one transaction.
//
// The store never creates the file in place and never lets the database
// library initialise a file that exists: a new store is made under a temporary
// name and linked into place, so a file found empty, short or unreadable is
// damage, reported as a *DamagedError and left as it is.
type Store struct {
	path string
	wait time.Duration // lockTimeout; shorter in tests
	mu   sync.Mutex    // one open handle per process at a time: flock is per open file
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

// Open prepares the records file at path, creating it and its buckets if it
// does not exist. A file that exists and is not a store postern can read is a
// *DamagedError; one held by another process for longer than the lock timeout
// is a *LockedError.
func Open(path string) (*Store, error) {
	dir := filepath.Dir(path)
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("create records directory %q: %w; fix: make it writable, or set POSTERN_HOME to a directory of your own", dir, err)
	}
	s := &Store{path: path, wait: lockTimeout}
	st, err := os.Stat(path)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		if target, lerr := os.Readlink(path); lerr == nil {
			return nil, &DamagedError{Path: path, Found: fmt.Sprintf("a symbolic link to %s, which does not exist", target)}
		}
		if err := s.create(); err != nil {
			return nil, err
		}
	case err != nil:
		return nil, s.fileError(err)
	case st.IsDir():
		return nil, &DamagedError{Path: path, Found: "a directory"}
	case !st.Mode().IsRegular():
		return nil, &DamagedError{Path: path, Found: "not a regular file (" + st.Mode().Type().String() + ")"}
	}
	// Only an older file lacks buckets; checking costs no fsync, which matters
	// on every 'postern run'.
	var missing [][]byte
	err = s.view(func(tx *bolt.Tx) error {
		for _, b := range allBuckets {
			if tx.Bucket(b) == nil {
				missing = append(missing, b)
			}
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	if len(missing) == len(allBuckets) {
		// A bbolt file, but not ours: every store postern made has its buckets.
		return nil, &DamagedError{Path: path, Found: "a bbolt file without postern's buckets (not a records file)"}
	}
	for _, b := range missing {
		if slices.ContainsFunc(firstBuckets, func(f []byte) bool { return bytes.Equal(f, b) }) {
			return nil, &DamagedError{Path: path, Found: fmt.Sprintf("a store without its %s bucket", b)}
		}
	}
	if len(missing) > 0 {
		// An older store: the buckets it lacks are added, once its pages are
		// checked, so that nothing is written into damage.
		if err := s.update(func(tx *bolt.Tx) error {
			var first error
			for err := range tx.Check() {
				first = cmp.Or(first, err)
			}
			if first != nil {
				return &DamagedError{Path: path, Found: fmt.Sprintf("pages that do not hold together (%v)", first)}
			}
			for _, b := range missing {
				if _, err := tx.CreateBucketIfNotExists(b); err != nil {
					return err
				}
			}
			return nil
		}); err != nil {
			return nil, err
		}
	}
	s.keepReserve()
	return s, nil
}

// create makes a new store: under a temporary name, with its buckets, then
// linked into place, so no process ever sees the file empty. If another
// process got there first, its file is kept.
func (s *Store) create() error {
	dir := filepath.Dir(s.path)
	f, err := os.CreateTemp(dir, "."+filepath.Base(s.path)+".new-*")
	if err != nil {
		return fmt.Errorf("create records file in %q: %w; fix: make the directory writable, or set POSTERN_HOME to a directory of your own", dir, err)
	}
	tmp := f.Name()
	f.Close()
	defer os.Remove(tmp)
	db, err := bolt.Open(tmp, 0o600, &bolt.Options{Timeout: lockTimeout})
	if err != nil {
		return fmt.Errorf("create records file %q: %w", tmp, err)
	}
	err = db.Update(func(tx *bolt.Tx) error {
		for _, b := range allBuckets {
			if _, err := tx.CreateBucket(b); err != nil {
				return err
			}
		}
		return nil
	})
	if cerr := db.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return fmt.Errorf("create records file %q: %w", tmp, err)
	}
	if err := os.Link(tmp, s.path); err != nil && !errors.Is(err, fs.ErrExist) {
		// A filesystem without hard links: rename, unless a file appeared.
		if _, serr := os.Stat(s.path); serr == nil {
			return nil
		}
		if rerr := os.Rename(tmp, s.path); rerr != nil {
			return fmt.Errorf("put the new records file in place at %q: %w", s.path, rerr)
		}
	}
	syncDir(dir)
	return nil
}

func syncDir(dir string) {
	if d, err := os.Open(dir); err == nil {
		_ = d.Sync()
		d.Close()
	}
}

// Path is the records file's path.
func (s *Store) Path() string { return s.path }

// Errors of a store's file that is not as a store should be; see DamagedError.
var (
	errEmpty      = errors.New("an empty file (0 bytes)")
	errNotRegular = errors.New("not a regular file")
)

// openDB opens the file for one transaction. It never creates the file and
// never hands the library an empty one to initialise. f is the file the
// library opened, so that a caller recovering from a panic can close it.
func (s *Store) openDB(readOnly bool, timeout time.Duration, f **os.File) (*bolt.DB, error) {
	opts := &bolt.Options{Timeout: timeout, ReadOnly: readOnly,
		OpenFile: func(name string, flag int, mode os.FileMode) (*os.File, error) {
			file, err := os.OpenFile(name, flag&^os.O_CREATE, mode)
			if err != nil {
				return nil, err
			}
			st, err := file.Stat()
			switch {
			case err != nil:
			case !st.Mode().IsRegular():
				err = errNotRegular
			case st.Size() == 0:
				err = errEmpty
			}
			if err != nil {
				file.Close()
				return nil, err
			}
			*f = file
			return file, nil
		}}
	return bolt.Open(s.path, 0o600, opts)
}

// update runs fn in one durable write transaction: when it returns nil the data is
// on disk (bbolt fsyncs on commit).
func (s *Store) update(fn func(*bolt.Tx) error) error {
	return s.transact(false, fn)
}

func (s *Store) view(fn func(*bolt.Tx) error) error {
	return s.transact(true, fn)
}

// transact runs fn in one transaction on a freshly opened file. Damage the
// library trips over (a panic, or a fault reading a mapped page past a
// truncated end) comes back as a *DamagedError.
func (s *Store) transact(readOnly bool, fn func(*bolt.Tx) error) (err error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.wait <= 0 {
		s.wait = lockTimeout
	}
	start := time.Now()
	how := unix.LOCK_EX
	if readOnly {
		how = unix.LOCK_SH
	}
	release, err := s.turn(how, s.wait)
	if err != nil {
		return err
	}
	if readOnly {
		// Take a turn and give it back at once: a writer holding its turn
		// holds back new readers, so readers in a loop cannot starve a run's
		// writes. Readers already reading finish their one transaction first.
		release()
		release = func() {}
	}
	defer release()

	var (
		file *os.File
		db   *bolt.DB
	)
	defer debug.SetPanicOnFault(debug.SetPanicOnFault(true))
	defer func() {
		r := recover()
		if r == nil {
			return
		}
		if db != nil {
			_ = db.Close()
		} else if file != nil {
			file.Close()
		}
		err = &DamagedError{Path: s.path, Found: fmt.Sprintf("pages the database library cannot read (%v)", r)}
	}()
	db, err = s.openDB(readOnly, max(s.wait-time.Since(start), 100*time.Millisecond), &file)
	if err != nil {
		return s.openError(err)
	}
	// A file cut short holds fewer pages than its meta page counts: reading
	// past its end would fault, and writing would bury the loss.
	whole := func(tx *bolt.Tx) error {
		st, err := file.Stat()
		if err != nil {
			return err
		}
		if need := tx.Size(); st.Size() < need {
			return &DamagedError{Path: s.path, Found: fmt.Sprintf("cut short: %d bytes, where its pages take %d", st.Size(), need)}
		}
		return fn(tx)
	}
	if readOnly {
		err = db.View(whole)
	} else {
		err = db.Update(whole)
	}
	if cerr := db.Close(); err == nil && cerr != nil {
		err = fmt.Errorf("close records %q: %w", s.path, cerr)
	}
	var errno syscall.Errno
	if err != nil && errors.As(err, &errno) {
		err = s.fileError(err)
	}
	return err
}

// openError explains why the library could not open the file.
func (s *Store) openError(err error) error {
	switch {
	case errors.Is(err, errEmpty):
		return &DamagedError{Path: s.path, Found: errEmpty.Error()}
	case errors.Is(err, errNotRegular):
		return &DamagedError{Path: s.path, Found: "not a regular file"}
	case errors.Is(err, syscall.EISDIR):
		return &DamagedError{Path: s.path, Found: "a directory"}
	case errors.Is(err, fs.ErrNotExist):
		return &DamagedError{Path: s.path, Found: "no file: it was moved or removed while postern used it",
			Fix: "put it back; if it is lost, run 'postern machine probe-confinement' again to measure the machines"}
	case errors.Is(err, berrors.ErrTimeout):
		return &LockedError{Path: s.path, Waited: s.wait, Holders: holders(s.path)}
	case errors.Is(err, berrors.ErrInvalid), errors.Is(err, berrors.ErrChecksum), errors.Is(err, berrors.ErrVersionMismatch):
		return &DamagedError{Path: s.path, Found: "not a bbolt database, or one whose both meta pages are damaged (" + err.Error() + ")"}
	}
	var errno syscall.Errno
	if errors.As(err, &errno) {
		return s.fileError(err)
	}
	// Anything else the library says about the file's content ("file size
	// too small", a bad page size) is damage too.
	return &DamagedError{Path: s.path, Found: err.Error()}
}

// fileError explains an error of the operating system's about the file.
func (s *Store) fileError(err error) error {
	switch {
	case errors.Is(err, fs.ErrPermission):
		owner := ""
		if st, serr := os.Stat(s.path); serr == nil {
			owner = " " + describeOwner(st)
		}
		return fmt.Errorf("records file %s cannot be used: %w (it is%s); fix: run postern as the user the records belong to, or set POSTERN_HOME to a directory of your own", s.path, err, owner)
	case errors.Is(err, syscall.ENOSPC), errors.Is(err, syscall.EDQUOT):
		return fmt.Errorf("records file %s: %w; fix: free space on its filesystem, or set POSTERN_HOME to a directory with room", s.path, err)
	case errors.Is(err, syscall.EROFS):
		return fmt.Errorf("records file %s: %w; fix: set POSTERN_HOME to a directory on a writable filesystem", s.path, err)
	}
	return fmt.Errorf("records file %s: %w", s.path, err)
}

func describeOwner(st os.FileInfo) string {
	if sys, ok := st.Sys().(*syscall.Stat_t); ok {
		return fmt.Sprintf("owned by uid %d, mode %s", sys.Uid, st.Mode().Perm())
	}
	return "mode " + st.Mode().Perm().String()
}

// turnPoll is how often a waiter tries the queue lock again, at most.
const turnPoll = 10 * time.Millisecond

// turn takes the queue lock beside the records file and returns its release. It
// waits at most timeout, trying again at short intervals: a blocking flock
// cannot be given up, and a holder that never lets go must become an error
// that names it, not a hang.
func (s *Store) turn(how int, timeout time.Duration) (func(), error) {
	name := s.path + ".turn"
	f, err := os.OpenFile(name, os.O_RDWR|os.O_CREATE|unix.O_CLOEXEC, 0o600)
	if err != nil {
		return nil, s.fileError(fmt.Errorf("open lock %s: %w", name, err))
	}
	deadline := time.Now().Add(timeout)
	wait := 100 * time.Microsecond
	for {
		err = unix.Flock(int(f.Fd()), how|unix.LOCK_NB)
		if err == nil {
			return func() { f.Close() }, nil
		}
		if err != unix.EWOULDBLOCK && err != unix.EINTR {
			f.Close()
			return nil, fmt.Errorf("lock records %s: %w", name, err)
		}
		if time.Now().After(deadline) {
			f.Close()
			return nil, &LockedError{Path: name, Waited: timeout, Holders: holders(name)}
		}
		time.Sleep(wait)
		wait = min(2*wait, turnPoll)
	}
}

// bucket returns a top-level bucket; a store without it is damaged (Open
// makes every bucket, so only damage removes one).
func (s *Store) bucket(tx *bolt.Tx, name []byte) (*bolt.Bucket, error) {
	b := tx.Bucket(name)
	if b == nil {
		return nil, &DamagedError{Path: s.path, Found: fmt.Sprintf("a store without its %s bucket", name)}
	}
	return b, nil
}

func (s *Store) putJSON(tx *bolt.Tx, bucket []byte, key string, v any) error {
	raw, err := json.Marshal(v)
	if err != nil {
		return fmt.Errorf("encode %s/%s: %w", bucket, key, err)
	}
	return s.putRaw(tx, bucket, key, raw)
}

func (s *Store) putRaw(tx *bolt.Tx, bucket []byte, key string, raw []byte) error {
	b, err := s.bucket(tx, bucket)
	if err != nil {
		return err
	}
	return b.Put([]byte(key), raw)
}

func (s *Store) getJSON(tx *bolt.Tx, bucket []byte, key string, v any) error {
	b, err := s.bucket(tx, bucket)
	if err != nil {
		return err
	}
	raw := b.Get([]byte(key))
	if raw == nil {
		return fmt.Errorf("%s %q: %w", bucket, key, ErrNotFound)
	}
	return s.decode(bucket, key, raw, v)
}

func (s *Store) decode(bucket []byte, key string, raw []byte, v any) error {
	if err := json.Unmarshal(raw, v); err != nil {
		return &DamagedError{Path: s.path, Found: fmt.Sprintf("%s/%s that does not decode (%v)", bucket, printableKey(key), err)}
	}
	return nil
}

func printableKey(k string) string {
	for _, r := range k {
		if r < 0x20 || r == 0x7f || r > 0x7e {
			return fmt.Sprintf("%q", k)
		}
	}
	return k
}

func seqKey(n uint64) []byte {
	var k [8]byte
	binary.BigEndian.PutUint64(k[:], n)
	return k[:]
}
