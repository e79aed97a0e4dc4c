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
//     working directory and home stay reachable; the host's terminals do
//     not), and makes every other filesystem
//     it shares with the host read-only, /proc/sys and /sys included, and
//     masks every device node but null, zero, full, random, urandom, tty and
//     ptmx: as root the run's uid is the host's, and a host file, kernel
//     setting or disk it could write (core_pattern, cron, /dev/vda) would be
//     a way out;
//   - starts the command through ExecArg, which drops every capability, locks
//     the securebits, sets no_new_privs and execs it, in a session of its own
//     whose terminal, if it has one, is a pty of the run's relayed to the
//     caller's;
//   - reaps, forwards signals, and exits with the command's status, which
//     ends every other process of the run.
//
// The run therefore cannot change the rules, add interfaces, enter another
// namespace, see or signal the door, or outlive itself. Nothing host-wide is
// touched: closing the Wall leaves nothing behind.
package netwall
