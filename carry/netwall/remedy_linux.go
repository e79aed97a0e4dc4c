//go:build !postern_wallinit

package netwall

import (
	"errors"
	"fmt"
	"os"
	"strings"
	"syscall"
)

// sysctls reads a sysctl under /proc/sys; ok is false when the kernel has none.
type sysctls func(name string) (value string, ok bool)

// machine is what remedies depend on: the sysctls and whether the caller is root.
type machine struct {
	sysctl sysctls
	root   bool
}

func thisMachine() machine { return machine{sysctl: procSysctl, root: os.Geteuid() == 0} }

func procSysctl(name string) (string, bool) {
	b, err := os.ReadFile("/proc/sys/" + strings.ReplaceAll(name, ".", "/"))
	if err != nil {
		return "", false
	}
	return strings.TrimSpace(string(b)), true
}

const (
	remedyAppArmor = "AppArmor restricts unprivileged user namespaces on this machine " +
		"(kernel.apparmor_restrict_unprivileged_userns=1): run " +
		"'sudo sysctl -w kernel.apparmor_restrict_unprivileged_userns=0' " +
		"(persist it in /etc/sysctl.d/), or give the postern binary an AppArmor profile with the 'userns' permission"
	remedyUsernsClone = "unprivileged user namespaces are disabled (kernel.unprivileged_userns_clone=0): " +
		"run 'sudo sysctl -w kernel.unprivileged_userns_clone=1'"
	remedyNftables = "the kernel lacks nftables NAT or reject support inside namespaces: enable " +
		"CONFIG_NF_TABLES, CONFIG_NF_TABLES_INET, CONFIG_NF_NAT, CONFIG_NFT_NAT, CONFIG_NFT_REDIR and " +
		"CONFIG_NFT_REJECT, or load the modules as root: 'modprobe -a nf_tables nft_chain_nat nft_redir nft_reject_inet'"
	remedyMount = "the kernel refused mounts in the run's user namespace; when postern runs in a container, " +
		"its /proc must be unmasked (e.g. podman --security-opt unmask=/proc/*) and seccomp must allow mount, open_tree and move_mount; " +
		"the wall needs Linux 5.12 or later (mount_setattr)"
	remedyOverlay = "the kernel refused an overlay in the run's user namespace, which keeps what a run writes in its home private: " +
		"use Linux 6.6 or later (overlayfs in user namespaces, tmpfs with user extended attributes) built with CONFIG_OVERLAY_FS and CONFIG_TMPFS_XATTR; " +
		"a home with other filesystems mounted inside it cannot be overlaid: run with HOME set to a directory without"
)

// remedy names what would let the kernel accept step, given the errno it
// answered with and the machine's sysctls.
func remedy(step string, errno syscall.Errno, m machine) string {
	sysctl := m.sysctl
	if v, ok := sysctl("kernel.apparmor_restrict_unprivileged_userns"); ok && v == "1" && !m.root &&
		(errno == syscall.EPERM || errno == syscall.EACCES) {
		return remedyAppArmor
	}
	switch step {
	case StepUserns:
		switch errno {
		case syscall.ENOSPC:
			v, _ := sysctl("user.max_user_namespaces")
			return fmt.Sprintf("user namespaces are limited (user.max_user_namespaces=%s here, or the limit of an enclosing namespace is used up): "+
				"run 'sudo sysctl -w user.max_user_namespaces=15000'", v)
		case syscall.EUSERS:
			return "user namespaces are nested too deeply (at most 32): run postern closer to the machine's initial namespace"
		case syscall.EINVAL:
			return "the kernel lacks namespaces: enable CONFIG_USER_NS, CONFIG_NET_NS, CONFIG_PID_NS and CONFIG_IPC_NS"
		}
		if v, ok := sysctl("kernel.unprivileged_userns_clone"); ok && v == "0" && !m.root {
			return remedyUsernsClone
		}
		if v, ok := sysctl("user.max_user_namespaces"); ok && v == "0" {
			return "user namespaces are disabled (user.max_user_namespaces=0): run 'sudo sysctl -w user.max_user_namespaces=15000'"
		}
		return "the kernel refused to create user namespaces for this user; in a container, seccomp must allow " +
			"clone/unshare with CLONE_NEWUSER (e.g. docker --security-opt seccomp=unconfined); check " +
			"kernel.unprivileged_userns_clone and user.max_user_namespaces"
	case StepLoopback, StepRoute:
		return "the kernel refused to configure the run's network namespace: enable CONFIG_NET_NS " +
			"(and CONFIG_IPV6 for IPv6 routes)"
	case StepNftables:
		return remedyNftables
	case StepMount:
		return remedyMount
	case StepOverlay:
		return remedyOverlay
	case StepListen:
		return "the kernel refused sockets inside the run's network namespace: check that IPv4 and IPv6 are not disabled"
	}
	return ""
}

// initError is an error that happened inside the wall's init; it unwraps to
// the errno the kernel answered with, if any.
type initError struct {
	msg   string
	errno syscall.Errno
}

func (e *initError) Error() string { return e.msg }

func (e *initError) Unwrap() error {
	if e.errno == 0 {
		return nil
	}
	return e.errno
}

func (we *wireError) kernelError(m machine) *KernelError {
	errno := syscall.Errno(we.Errno)
	return &KernelError{
		Step:   we.Step,
		Err:    &initError{msg: we.Message, errno: errno},
		Remedy: remedy(we.Step, errno, m),
	}
}

// Remedy names what would let the kernel accept step (one of the Step
// constants) after it refused with err, as read from this machine's sysctls.
func Remedy(step string, err error) string {
	var errno syscall.Errno
	errors.As(err, &errno)
	return remedy(step, errno, thisMachine())
}
