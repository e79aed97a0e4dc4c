package records

import (
	"errors"
	"os"
	"path/filepath"
	"syscall"
)

// reserveSize is the room kept beside the records file for the writes that
// matter most when its filesystem fills up: a run's final record. A run that
// floods the disk with events loses those events, not its record.
const reserveSize = 1 << 20

func (s *Store) reservePath() string { return s.path + ".reserve" }

// keepReserve makes the reserve file if it is missing, fully written so that
// its blocks are really taken. It is best effort: with no room for it, the
// store works without one.
func (s *Store) keepReserve() {
	if _, err := os.Stat(s.reservePath()); err == nil {
		return
	}
	f, err := os.CreateTemp(filepath.Dir(s.path), "."+filepath.Base(s.reservePath())+".new-*")
	if err != nil {
		return
	}
	tmp := f.Name()
	_, err = f.Write(make([]byte, reserveSize))
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(tmp, s.reservePath())
	}
	if err != nil {
		os.Remove(tmp)
	}
}

// releaseReserve gives the reserve's room back to the filesystem, reporting
// whether there was one.
func (s *Store) releaseReserve() bool {
	return os.Remove(s.reservePath()) == nil
}

// isNoSpace reports whether err is a full filesystem or quota.
func isNoSpace(err error) bool {
	return errors.Is(err, syscall.ENOSPC) || errors.Is(err, syscall.EDQUOT)
}
