package netwall

import (
	"bufio"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/postern-dev/postern/internal/kernel"
)

// A run's processes and threads are held to a limit, so that a fork bomb
// inside it cannot use up the host's pids:
//
//   - by a cgroup of its own with pids.max, where postern may make one
//     (cgroup v1's pids hierarchy, or v2 with the pids controller enabled
//     where the run's cgroup goes). It counts every task of the run, root or
//     not, and goes when the run does;
//   - where the only such cgroup is a cgroup v1 one, the kernel is 6.14 or
//     later and the limit is pidMaxLeast or more, by the run's own pid
//     namespace's pid_max, which its init sets before the command starts, to
//     the limit plus 300: once the namespace's numbers have wrapped, the
//     kernel hands out only those from 300 up, so the run can always hold
//     limit tasks at once, and before they first wrap it may hold up to 299
//     more. Moving a process into a cgroup v1 waits for an RCU grace period,
//     7 to 18 ms measured on an idle machine, which every run would wait for
//     before its command starts; pid_max costs one write. Smaller limits,
//     where 299 more would be much more, older kernels, and an init whose
//     write is refused keep the cgroup v1;
//   - else by RLIMIT_NPROC, set before the command starts. Since Linux 5.14 it
//     counts the processes of the run's uid in the run's own user namespace,
//     so it is the run's alone; before, it counts all the user's processes on
//     the machine. The kernel does not hold root to it: a run as root with no
//     cgroup has no limit, and PidsLimit says so.

// cgroupPrefix starts the name of every cgroup a run gets; Sweep-like removal
// of empty leftovers looks for it.
const cgroupPrefix = "postern-run-"

// pidsCgroup is a run's own cgroup holding its pids limit.
type pidsCgroup struct {
	dir     string // its directory in the cgroup filesystem
	version int    // 1 or 2
}

// newPidsCgroup makes a cgroup limited to limit tasks where this process may,
// or returns nil and why not (pidMaxInstead where the run's pid_max is to
// hold it). onlyV1 makes a cgroup v1 one or none: for an init already
// started, which can only be moved into one.
func newPidsCgroup(limit int, onlyV1 bool) (*pidsCgroup, string) {
	v1, v2, err := cgroupMounts()
	if err != nil {
		return nil, err.Error()
	}
	own, err := ownCgroups()
	if err != nil {
		return nil, err.Error()
	}
	name := fmt.Sprintf("%s%d-%s", cgroupPrefix, os.Getpid(), randSuffix())
	var why []string
	if v2 != "" && !onlyV1 {
		// First: the run starts in a v2 cgroup, with no move to wait for.
		if p, ok := own[""]; ok {
			base := filepath.Join(v2, p)
			for _, parent := range []string{base, filepath.Dir(base)} {
				if !under(parent, []string{v2}) {
					continue
				}
				c, err := makeCgroup(parent, name, limit, 2)
				if err == nil {
					return c, ""
				}
				why = append(why, err.Error())
			}
		}
	}
	if v1 != "" {
		if p, ok := own["pids"]; ok && !onlyV1 && pidMaxHolds(limit) {
			// No cgroup of its own: what runs killed with postern left
			// empty goes all the same.
			sweepCgroups(filepath.Join(v1, p))
			return nil, pidMaxInstead
		}
		if p, ok := own["pids"]; ok {
			c, err := makeCgroup(filepath.Join(v1, p), name, limit, 1)
			if err == nil {
				return c, ""
			}
			why = append(why, err.Error())
		}
	}
	if len(why) == 0 {
		return nil, "no cgroup hierarchy with the pids controller"
	}
	return nil, strings.Join(why, "; ")
}

// pidMaxInstead is newPidsCgroup's why where the run's pid namespace's
// pid_max is to hold it rather than a cgroup v1 of its own.
const pidMaxInstead = "pid_max instead of a cgroup v1"

// pidMaxHolds says whether the run's pid namespace's pid_max is to hold
// limit here: Linux 6.14 made pid_max a pid namespace's own.
func pidMaxHolds(limit int) bool {
	return limit >= pidMaxLeast && kernel.AtLeast(6, 14)
}

// pidMaxLeast is the least limit pid_max holds: the up to 299 tasks more a
// run may have before its pids first wrap are at most 30% of it.
const pidMaxLeast = 1000

// pidsReserved is the kernel's RESERVED_PIDS: once a pid namespace's
// numbers have wrapped, it hands out only those from here up.
const pidsReserved = 300

// pidMaxFor is the pid_max that holds a run to limit tasks once its pids
// have wrapped: the numbers from pidsReserved up to it. (A variable: a test
// gives one the kernel refuses, to see the run held by a cgroup instead.)
var pidMaxFor = func(limit int) int { return limit + pidsReserved }

// setPidMax sets the calling process's pid namespace's pid_max: the init's
// step for a run that pid_max holds.
func setPidMax(n int) error {
	return os.WriteFile("/proc/sys/kernel/pid_max", []byte(strconv.Itoa(n)), 0)
}

// makeCgroup makes parent/name with pids.max = limit, after removing what
// earlier runs left there empty.
func makeCgroup(parent, name string, limit, version int) (*pidsCgroup, error) {
	if version == 2 {
		// A v2 cgroup has the pids controller only where its parent hands
		// it down: without it, no cgroup to make and remove again.
		b, err := os.ReadFile(filepath.Join(parent, "cgroup.subtree_control"))
		if err == nil && !slices.Contains(strings.Fields(string(b)), "pids") {
			return nil, fmt.Errorf("cgroup %s does not hand the pids controller down (cgroup.subtree_control: %q)", parent, strings.TrimSpace(string(b)))
		}
	}
	sweepCgroups(parent)
	dir := filepath.Join(parent, name)
	if err := os.Mkdir(dir, 0o755); err != nil {
		return nil, fmt.Errorf("make cgroup %s: %w", dir, err)
	}
	c := &pidsCgroup{dir: dir, version: version}
	if err := os.WriteFile(filepath.Join(dir, "pids.max"), []byte(strconv.Itoa(limit)), 0); err != nil {
		c.remove()
		return nil, fmt.Errorf("set pids.max in %s: %w", dir, err)
	}
	return c, nil
}

// setLimit sets the cgroup's pids.max to limit.
func (c *pidsCgroup) setLimit(limit int) error {
	if err := os.WriteFile(filepath.Join(c.dir, "pids.max"), []byte(strconv.Itoa(limit)), 0); err != nil {
		return fmt.Errorf("set pids.max in %s: %w", c.dir, err)
	}
	return nil
}

// add moves pid (with its threads) into the cgroup.
func (c *pidsCgroup) add(pid int) error {
	if err := os.WriteFile(filepath.Join(c.dir, "cgroup.procs"), []byte(strconv.Itoa(pid)), 0); err != nil {
		return fmt.Errorf("move the run into cgroup %s: %w", c.dir, err)
	}
	return nil
}

// remove removes the cgroup once the run's last task has left it.
func (c *pidsCgroup) remove() {
	deadline := time.Now().Add(2 * time.Second)
	for {
		err := os.Remove(c.dir)
		if err == nil || errors.Is(err, os.ErrNotExist) || time.Now().After(deadline) {
			return
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func (c *pidsCgroup) String() string {
	return fmt.Sprintf("cgroup v%d %s", c.version, c.dir)
}

// sweepCgroups removes the cgroups runs killed with postern left under
// parent: a cgroup with a task in it cannot be removed, so only empty ones go.
func sweepCgroups(parent string) {
	ents, err := os.ReadDir(parent)
	if err != nil {
		return
	}
	for _, e := range ents {
		if e.IsDir() && strings.HasPrefix(e.Name(), cgroupPrefix) && !ownerAlive(e.Name()) {
			_ = os.Remove(filepath.Join(parent, e.Name()))
		}
	}
}

// ownerAlive says whether the postern that made the cgroup name (the pid
// after cgroupPrefix) is still running. Its cgroup is empty for a moment
// after it is made, before its run's init moves in (cgroup v1): another run
// starting then must not sweep it away.
func ownerAlive(name string) bool {
	pidText, _, _ := strings.Cut(strings.TrimPrefix(name, cgroupPrefix), "-")
	pid, err := strconv.Atoi(pidText)
	if err != nil || pid <= 0 {
		return false
	}
	err = syscall.Kill(pid, 0)
	return err == nil || errors.Is(err, syscall.EPERM)
}

// cgroupMounts finds the cgroup v1 hierarchy holding the pids controller and
// the cgroup v2 hierarchy, where mounted.
func cgroupMounts() (v1pids, v2 string, err error) {
	f, err := os.Open("/proc/self/mountinfo")
	if err != nil {
		return "", "", fmt.Errorf("read mounts: %w", err)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		sep := slices.Index(fields, "-")
		if sep < 0 || len(fields) < sep+4 || len(fields) < 5 {
			continue
		}
		mnt, fstype, opts := unescapeMount(fields[4]), fields[sep+1], fields[sep+3]
		switch {
		case fstype == "cgroup2" && v2 == "":
			v2 = mnt
		case fstype == "cgroup" && v1pids == "" && slices.Contains(strings.Split(opts, ","), "pids"):
			v1pids = mnt
		}
	}
	return v1pids, v2, sc.Err()
}

// ownCgroups maps each v1 controller of this process to its cgroup path, and
// "" to its v2 path.
func ownCgroups() (map[string]string, error) {
	b, err := os.ReadFile("/proc/self/cgroup")
	if err != nil {
		return nil, fmt.Errorf("read /proc/self/cgroup: %w", err)
	}
	out := map[string]string{}
	for _, line := range strings.Split(strings.TrimSpace(string(b)), "\n") {
		parts := strings.SplitN(line, ":", 3)
		if len(parts) != 3 {
			continue
		}
		if parts[0] == "0" && parts[1] == "" {
			out[""] = parts[2]
			continue
		}
		for _, c := range strings.Split(parts[1], ",") {
			out[c] = parts[2]
		}
	}
	return out, nil
}
