// Package netwall raises the Linux network wall: a run in its own user, network, pid
// and mount namespaces whose only way out is the door.
//
// Raise re-executes the binary (Self) with InitArg in new namespaces, mapping
// the caller's uid and gid to themselves, so it works for root and, where the
// kernel allows unprivileged user namespaces, for anyone. That init, pid 1 of
// the run:
//
//   - brings lo up with IPv4 and IPv6 default routes through it: every
//     address is routable and nothing leaves, there being no other interface;
//   - opens the door's listeners inside the namespace and passes them back
//     over a unix socket, so the door serves them from the host namespace and
//     dials out normally while the run cannot;
//   - installs one inet nftables table in one transaction (see Rules): port 53
//     to any address goes to the door's DNS, the policy's TCP ports to any
//     non-loopback address go to the door's transparent listener, loopback
//     stays open for the run's own servers, other TCP is reset, other UDP
//     rejected, everything else dropped;
//   - gives the run fresh /tmp, /run, /dev/shm, /proc and /dev/pts (the
//     host's terminals are not there), makes every other filesystem it
//     shares with the host read-only, /proc/sys and /sys included, and gives
//     it a /dev of its own with no device node but null, zero, full, random,
//     urandom, tty and ptmx (a link into its devpts):
//     as root the run's uid is the host's, and a host file, kernel setting or
//     disk it could write (core_pattern, cron, /dev/vda) would be a way out;
//   - lays the run's places over that, by allow-list (see Files and
//     layout_linux.go): the home reads as the real one but takes writes into
//     a private layer discarded at the end, the working directory and the
//     policy's writable places are written for real, a repository's git
//     directories take what a commit writes and nothing git obeys, and
//     postern's records, its agents and the policy's deny_read are masked;
//   - starts the command from a thread of its own that first drops every
//     capability, locks the securebits, sets no_new_privs, refuses setuid
//     and setgid bits with a seccomp filter and marks every descriptor above
//     2 close-on-exec (for Landlock, and for what only it reports, through
//     ExecArg, which does the same and execs), in a session of its own whose
//     terminal, if it has one, is a pty of the run's relayed to the
//     caller's, with at most the run's pids limit of processes (its own
//     cgroup, else RLIMIT_NPROC);
//   - reaps, forwards signals, and once the command ends kills every other
//     process of the run, brings home what may come home from the private
//     layer (see Ending), and exits with the command's status.
//
// The run therefore cannot change the rules, add interfaces, enter another
// namespace, see or signal the door, or outlive itself. Nothing host-wide is
// touched: closing the Wall leaves nothing behind.
package netwall
