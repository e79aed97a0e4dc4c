package dispatch

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"golang.org/x/sys/unix"

	"github.com/postern-dev/postern/records"
)

// CommandError is a run's command that cannot be started where it would
// run, looked up as a shell looks it up: not found (a shell's exit status
// 127), or found but not executable (126). Nothing was spawned for it.
type CommandError struct {
	Command  string
	NotFound bool
	Detail   string // where it was looked for, or why it cannot be executed
}

func (e *CommandError) Error() string {
	if e.NotFound {
		return fmt.Sprintf("command %q not found (%s)", e.Command, e.Detail)
	}
	return fmt.Sprintf("command %q cannot be executed: %s", e.Command, e.Detail)
}

// Code is the exit status a shell gives such a command: 127 or 126.
func (e *CommandError) Code() int {
	if e.NotFound {
		return 127
	}
	return 126
}

// End is how a run with this command ended (records.End*).
func (e *CommandError) End() string {
	if e.NotFound {
		return records.EndNotFound
	}
	return records.EndNotExecutable
}

// pathPassed reports whether vars ("NAME=VALUE") set PATH.
func pathPassed(vars []string) bool {
	for _, kv := range vars {
		if strings.HasPrefix(kv, "PATH=") {
			return true
		}
	}
	return false
}

// defaultPath is the PATH a command is looked up in when the run's
// environment has none, as the wall's last stage does.
const defaultPath = "/usr/local/bin:/usr/bin:/bin"

// checkCommand looks argv[0] up as the run would: a name with a slash
// relative to dir, else in env's PATH. It returns what makes the command
// one that cannot be started (nil when it can), before anything is spawned.
// The error names the PATH searched unless passed, which says PATH was given
// with --env: a value given so is never written into a record.
func checkCommand(argv []string, dir string, env []string, passed bool) *CommandError {
	if len(argv) == 0 || argv[0] == "" {
		return &CommandError{NotFound: true, Detail: "the command is empty"}
	}
	name := argv[0]
	if strings.Contains(name, "/") {
		p := name
		if !filepath.IsAbs(p) {
			p = filepath.Join(dir, p)
		}
		st, err := os.Stat(p)
		switch {
		case os.IsNotExist(err):
			return &CommandError{Command: name, NotFound: true, Detail: "no such file " + p}
		case err != nil:
			return &CommandError{Command: name, Detail: err.Error()}
		case st.IsDir():
			return &CommandError{Command: name, Detail: p + " is a directory"}
		}
		if !executable(p, st) {
			return &CommandError{Command: name, Detail: p + ": permission denied (not executable)"}
		}
		return nil
	}
	path, ok := lookupEnv(env, "PATH")
	if !ok || path == "" {
		path = defaultPath
	}
	var denied string
	for _, d := range filepath.SplitList(path) {
		if d == "" {
			d = "."
		}
		if !filepath.IsAbs(d) {
			d = filepath.Join(dir, d)
		}
		p := filepath.Join(d, name)
		st, err := os.Stat(p)
		if err != nil || st.IsDir() {
			continue
		}
		if executable(p, st) {
			return nil
		}
		if denied == "" {
			denied = p
		}
	}
	if denied != "" {
		return &CommandError{Command: name, Detail: denied + ": permission denied (not executable)"}
	}
	if passed {
		return &CommandError{Command: name, NotFound: true, Detail: "not in the run's PATH, as given with --env"}
	}
	return &CommandError{Command: name, NotFound: true, Detail: "not in PATH=" + path}
}

// executable reports whether the run's user may execute the regular file p:
// an execute bit set (root needs one too) and access(2) agreeing.
func executable(p string, st os.FileInfo) bool {
	return st.Mode().IsRegular() && st.Mode()&0o111 != 0 && unix.Access(p, unix.X_OK) == nil
}
