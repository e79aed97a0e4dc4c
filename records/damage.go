package records

import (
	"errors"
	"fmt"
	"strings"
	"time"
)

// ErrDamaged is what every *DamagedError is (errors.Is).
var ErrDamaged = errors.New("records file damaged")

// DamagedError is a records file that is not a store postern can read: empty,
// short, not a bbolt file, a directory, a store missing a bucket or holding a
// value that does not decode. postern never repairs, deletes or overwrites such
// a file by itself: what it holds may still be read by other means, and the
// machines' measurements in it are not typed by hand.
type DamagedError struct {
	Path  string
	Found string // what was found instead of a store
	// Fix is what to do; "" is the usual: move the file aside and measure again.
	Fix string
}

func (e *DamagedError) Error() string {
	fix := e.Fix
	if fix == "" {
		fix = fmt.Sprintf("move it aside (mv %s %s.damaged) and run 'postern machine probe-confinement' again to measure the machines (remote ones need 'postern machine add' first)",
			shellWord(e.Path), shellWord(e.Path))
	}
	return fmt.Sprintf("records file %s is damaged (%s); postern changed nothing in it: %s", e.Path, e.Found, fix)
}

// Is makes errors.Is(err, ErrDamaged) true.
func (e *DamagedError) Is(target error) bool { return target == ErrDamaged }

// ErrLocked is what every *LockedError is (errors.Is).
var ErrLocked = errors.New("records file locked")

// LockedError is a records file another process held for longer than any
// operation of postern's holds it.
type LockedError struct {
	Path    string        // the file that stayed locked (the store, or its .turn beside it)
	Waited  time.Duration // how long postern waited
	Holders []string      // the processes that have it open, as "pid N (name)", if they could be found
}

func (e *LockedError) Error() string {
	who := "another process"
	if len(e.Holders) > 0 {
		who = strings.Join(e.Holders, ", ")
	}
	return fmt.Sprintf("records file %s is held by %s and was not let go within %s (postern holds it only for one write at a time); fix: end that process, or wait for it and try again",
		e.Path, who, e.Waited)
}

// Is makes errors.Is(err, ErrLocked) true.
func (e *LockedError) Is(target error) bool { return target == ErrLocked }

// shellWord quotes p for a shell when it needs it.
func shellWord(p string) string {
	if p != "" && !strings.ContainsFunc(p, func(r rune) bool {
		return !(r == '/' || r == '.' || r == '_' || r == '-' || r == '+' || r == ',' || r == ':' || r == '@' ||
			(r >= 'a' && r <= 'z') || (r >= 'A' && r <= 'Z') || (r >= '0' && r <= '9'))
	}) {
		return p
	}
	return "'" + strings.ReplaceAll(p, "'", `'\''`) + "'"
}
