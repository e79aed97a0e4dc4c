package netwall

import (
	"fmt"
	"os"
	"strconv"
	"strings"

	"github.com/landlock-lsm/go-landlock/landlock"
	llsys "github.com/landlock-lsm/go-landlock/landlock/syscall"
)

// landlockNetABI is the first Landlock ABI with network rules.
const landlockNetABI = 4

// LandlockStatus says what Landlock confinement a walled command with
// LandlockEnv gets on this kernel, e.g. "abi 7: tcp connect to 53,443".
func LandlockStatus(ports []uint16) string {
	abi, err := llsys.LandlockGetABIVersion()
	switch {
	case err != nil:
		return "none: landlock unavailable (" + err.Error() + ")"
	case abi < landlockNetABI:
		return fmt.Sprintf("abi %d: no network rules (they need abi %d)", abi, landlockNetABI)
	}
	_, list, _ := strings.Cut(LandlockConnectEnv(ports), "=")
	return fmt.Sprintf("abi %d: tcp connect only to ports %s", abi, list)
}

// applyLandlock confines this thread group as LandlockEnv asks, if it is set, and
// removes it from the environment. no_new_privs must already be set.
func applyLandlock() error {
	spec, ok := os.LookupEnv(LandlockEnv)
	if !ok {
		return nil
	}
	os.Unsetenv(LandlockEnv)
	var rules []landlock.Rule
	for _, f := range strings.Split(spec, ",") {
		p, err := strconv.ParseUint(strings.TrimSpace(f), 10, 16)
		if err != nil {
			return fmt.Errorf("landlock: bad port %q in %s", f, LandlockEnv)
		}
		rules = append(rules, landlock.ConnectTCP(uint16(p)))
	}
	abi, err := llsys.LandlockGetABIVersion()
	if err != nil || abi < landlockNetABI {
		return nil // nothing to apply on this kernel; LandlockStatus says so
	}
	cfg, err := landlock.NewConfig(landlock.AccessNetSet(llsys.AccessNetConnectTCP))
	if err != nil {
		return fmt.Errorf("landlock: %w", err)
	}
	if err := cfg.BestEffort().RestrictNet(rules...); err != nil {
		return fmt.Errorf("landlock: restrict tcp connect to %s: %w", spec, err)
	}
	return nil
}
