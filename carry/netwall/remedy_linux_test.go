package netwall

import (
	"errors"
	"os"
	"strings"
	"syscall"
	"testing"
)

func TestRemedy(t *testing.T) {
	tests := []struct {
		name    string
		step    string
		errno   syscall.Errno
		sysctls map[string]string
		root    bool
		want    string
	}{
		{"apparmor", StepUserns, syscall.EPERM, map[string]string{"kernel.apparmor_restrict_unprivileged_userns": "1"}, false,
			"sysctl -w kernel.apparmor_restrict_unprivileged_userns=0"},
		{"apparmor-blocks-mounts-later", StepMount, syscall.EPERM, map[string]string{"kernel.apparmor_restrict_unprivileged_userns": "1"}, false,
			"apparmor_restrict_unprivileged_userns=0"},
		{"apparmor-does-not-apply-to-root", StepUserns, syscall.EPERM, map[string]string{"kernel.apparmor_restrict_unprivileged_userns": "1", "user.max_user_namespaces": "100"}, true,
			"seccomp"},
		{"debian-clone-switch", StepUserns, syscall.EPERM, map[string]string{"kernel.unprivileged_userns_clone": "0"}, false,
			"sysctl -w kernel.unprivileged_userns_clone=1"},
		{"max-zero", StepUserns, syscall.ENOSPC, map[string]string{"user.max_user_namespaces": "0"}, false,
			"user.max_user_namespaces=0 here"},
		{"no-config", StepUserns, syscall.EINVAL, nil, false, "CONFIG_USER_NS"},
		{"nesting", StepUserns, syscall.EUSERS, nil, false, "nested too deeply"},
		{"nft", StepNftables, syscall.EOPNOTSUPP, nil, true, "CONFIG_NFT_REDIR"},
		{"nft-missing-module", StepNftables, syscall.ENOENT, nil, false, "modprobe"},
		{"mount", StepMount, syscall.EPERM, nil, false, "unmask=/proc"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			m := machine{root: tt.root, sysctl: func(name string) (string, bool) {
				v, ok := tt.sysctls[name]
				return v, ok
			}}
			if got := remedy(tt.step, tt.errno, m); !strings.Contains(got, tt.want) {
				t.Errorf("remedy(%s, %v) = %q, want it to contain %q", tt.step, tt.errno, got, tt.want)
			}
		})
	}
}

// TestWithFirstError: when both clones of the init fail, the error a person
// reads names both, and the remedy is found from the second's errno.
func TestWithFirstError(t *testing.T) {
	first := error(&os.SyscallError{Syscall: "clone", Err: syscall.EPERM})
	err := error(&withFirstError{err: &os.SyscallError{Syscall: "clone", Err: syscall.ENOSPC}, first: first})
	var errno syscall.Errno
	if !errors.As(err, &errno) || errno != syscall.ENOSPC {
		t.Fatalf("errno found in %v: %v, want ENOSPC (the clone with a user namespace)", err, errno)
	}
	for _, want := range []string{"no space left on device", "before that, without a user namespace", "operation not permitted"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("%q does not say %q", err.Error(), want)
		}
	}
}
