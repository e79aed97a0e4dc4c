package ownns

import (
	"path"
	"syscall"
)

// Env marks a postern exec'd by the launch, so that it is never launched
// twice; Enter takes it out of the environment, so no run and no child of
// postern's sees it.
const Env = "POSTERN_OWN_USERNS"

// LaunchArg starts the small pid 1's launch mode: "-launch FD CAPS --
// ARGV...", FD an O_PATH descriptor of the executable to exec, CAPS the
// capabilities to keep across that exec, hexadecimal, bit N for
// capability N.
const LaunchArg = "-launch"

// InitEnv, set to "go", has every run start the wall's Go init, as before
// postern set walls up itself (netwall.InitEnv): no namespace of postern's
// own either.
const InitEnv = "POSTERN_WALL_INIT"

// Pid1Prefix starts the name of the wall's small pid 1 kept in the init
// directory: the rest is the start of the SHA-256 of the Go init it is
// attached to, in hexadecimal (netwall keeps it there).
const Pid1Prefix = "wall-pid1-"

// Caps are the capabilities the wall's set-up holds (netwall's initCaps:
// CAP_NET_ADMIN, CAP_SYS_ADMIN, CAP_NET_BIND_SERVICE, CAP_SETPCAP,
// CAP_DAC_OVERRIDE), bit N for capability N.
const Caps = 1<<12 | 1<<21 | 1<<10 | 1<<8 | 1<<1

// RunsWallHere says whether args, postern's command line, is a run that
// will most likely raise a network wall on this machine: `run`, naming no
// machine but local, no container, and not --egress-open. A word after "--"
// is the command's.
func RunsWallHere(args []string) bool {
	if len(args) < 2 || args[1] != "run" {
		return false
	}
	for i := 2; i < len(args); i++ {
		switch a := args[i]; {
		case a == "--":
			return true
		case a == "--machine":
			if i+1 < len(args) && args[i+1] == "local" {
				i++
				continue
			}
			return false
		case a == "--machine=local":
		case hasPrefix(a, "--machine="), a == "--container", hasPrefix(a, "--container="),
			// A run without a wall: its command is postern's child, and
			// gets nothing from a namespace of postern's but what it
			// lacks there (setuid helpers, others' ids).
			a == "--egress-open", hasPrefix(a, "--egress-open="):
			return false
		}
	}
	return true
}

// hasPrefix is strings.HasPrefix, which this package does without (see
// ownns_linux.go).
func hasPrefix(s, prefix string) bool { return len(s) >= len(prefix) && s[:len(prefix)] == prefix }

// InitDir is where local runs keep the wall's init and its small pid 1:
// "lib" beside the records (records.DefaultPath); "" where that cannot be
// told.
func InitDir() string {
	if h, _ := syscall.Getenv("POSTERN_HOME"); h != "" {
		return path.Join(h, "lib")
	}
	if x, _ := syscall.Getenv("XDG_STATE_HOME"); x != "" {
		return path.Join(x, "postern", "lib")
	}
	if h, _ := syscall.Getenv("HOME"); h != "" {
		return path.Join(h, ".local", "state", "postern", "lib")
	}
	return ""
}
