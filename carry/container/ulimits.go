package container

import (
	"fmt"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
)

// rlimitNames are the engines' --ulimit names by Linux resource number
// (asm-generic/resource.h; containers are Linux whatever runs the client).
var rlimitNames = map[int]string{
	0: "cpu", 1: "fsize", 2: "data", 3: "stack", 4: "core", 5: "rss",
	6: "nproc", 7: "nofile", 8: "memlock", 9: "as", 10: "locks", 11: "sigpending",
	12: "msgqueue", 13: "nice", 14: "rtprio", 15: "rttime",
}

// rlimitRefusedRE is the OCI runtime's (runc's and crun's) refusal to set a
// resource limit above what the engine's own processes may raise it to: the
// engine asks for its defaults (podman: 1048576 open files), the machine's hard
// limit is lower and the engine lacks CAP_SYS_RESOURCE.
var rlimitRefusedRE = sync.OnceValue(func() *regexp.Regexp {
	return regexp.MustCompile("(?i)(?:error setting rlimit type (\\d+)|setrlimit\\s+`?RLIMIT_([A-Z]+)`?)[^\\n]*?(?:operation not permitted|permission denied)")
})

// rlimitByName maps RLIMIT_X suffixes (crun's spelling) to resource numbers.
var rlimitByName = func() map[string]int {
	m := make(map[string]int, len(rlimitNames))
	for n, name := range rlimitNames {
		m[strings.ToUpper(name)] = n
	}
	return m
}()

// refusedRlimit finds, in what the engine printed when a container failed to
// start, the resource limit the runtime could not set.
func refusedRlimit(stderr string) (int, bool) {
	m := rlimitRefusedRE().FindStringSubmatch(stderr)
	if m == nil {
		return 0, false
	}
	if m[1] != "" {
		n, err := strconv.Atoi(m[1])
		_, known := rlimitNames[n]
		return n, err == nil && known
	}
	n, ok := rlimitByName[strings.ToUpper(m[2])]
	return n, ok
}

// ulimitFlags are the --ulimit flags adapted so far.
func (e *Engine) ulimitFlags() []string {
	e.mu.Lock()
	defer e.mu.Unlock()
	var out []string
	for _, r := range sortedKeys(e.ulimits) {
		out = append(out, "--ulimit", fmt.Sprintf("%s=%d:%d", rlimitNames[r], e.ulimits[r], e.ulimits[r]))
	}
	return out
}

func sortedKeys(m map[int]uint64) []int {
	keys := make([]int, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}
