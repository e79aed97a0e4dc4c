package seatbelt

import (
	"os"
	"path/filepath"
	"slices"

	"github.com/postern-dev/postern/internal/termtext"
)

// The profile denies every write to a guarded path, but it matches paths, and
// a file has as many paths as hard links: a link the run makes in its working
// directory to ~/.bashrc is a name the profile lets it write. So the guarded
// paths are also looked at before the run and once every process of it is
// gone, and what changed is told to the person (as the Linux wall does for
// what it cannot hold read-only). A file's change time moves with every
// write, link and attribute change, and no call sets it back.

// GuardChange is a guarded path that is not what it was before the run.
type GuardChange struct {
	Path string
	// What happened to it, as the end of a sentence about Path.
	What string
}

func (c GuardChange) String() string { return termtext.Printable(c.Path) + " " + c.What }

// guardWatchEntries bounds the entries of one guarded directory looked at.
const guardWatchEntries = 256

// fileState is what a path was: nothing, or its type, size, link target and
// change time.
type fileState struct {
	exists bool
	mode   os.FileMode
	size   int64
	link   string
	ctime  int64 // nanoseconds
	nlink  uint64
}

func stateOf(p string) fileState {
	st, err := os.Lstat(p)
	if err != nil {
		return fileState{}
	}
	s := fileState{exists: true, mode: st.Mode().Type(), size: st.Size()}
	s.ctime, s.nlink = changeTime(st)
	if st.Mode()&os.ModeSymlink != 0 {
		s.link, _ = os.Readlink(p)
	}
	return s
}

// watchGuards records each guarded path and, for a directory, its entries.
func watchGuards(guarded []string) map[string]fileState {
	out := make(map[string]fileState)
	for _, g := range guarded {
		s := stateOf(g)
		out[g] = s
		if !s.exists || s.mode != os.ModeDir {
			continue
		}
		ents, _ := os.ReadDir(g)
		for i, e := range ents {
			if i == guardWatchEntries {
				break
			}
			p := filepath.Join(g, e.Name())
			out[p] = stateOf(p)
		}
	}
	return out
}

// guardChanges are the watched paths that are not what they were, in order.
func guardChanges(before map[string]fileState) []GuardChange {
	var out []GuardChange
	paths := make([]string, 0, len(before))
	for p := range before {
		paths = append(paths, p)
	}
	slices.Sort(paths)
	for _, p := range paths {
		was, now := before[p], stateOf(p)
		switch {
		case was == now:
		case !was.exists:
			out = append(out, GuardChange{Path: p, What: "appeared during the run"})
		case !now.exists:
			out = append(out, GuardChange{Path: p, What: "was removed during the run"})
		case now.nlink > was.nlink:
			out = append(out, GuardChange{Path: p, What: "got another name (a hard link) during the run, and may have been changed through it"})
		default:
			out = append(out, GuardChange{Path: p, What: "changed during the run"})
		}
	}
	return out
}
