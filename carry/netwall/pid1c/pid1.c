/*
 * pid1 is the first process of a walled run's pid namespace.
 *
 * The parent has made the namespaces and talks to this program over fd 3,
 * an AF_UNIX SOCK_SEQPACKET socket carrying one record per datagram. pid1
 * joins the run's network namespace (handed over with the setup record, as
 * it is made beside pid1's start), sets the pid namespace's pid_max, starts
 * the command with every privilege dropped, forwards signals to it, and once
 * it ends kills and reaps whatever is left in the namespace before reporting
 * the command's status.
 *
 * It has a second, unrelated mode, "-launch", which postern execs before it
 * runs as a user without privileges (see launch below).
 *
 * Build (the Makefile's): musl-gcc or cc -static -Os -s -Wall -Wextra -Werror
 */
#define _GNU_SOURCE
#include <ctype.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <sched.h>
#include <signal.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/signalfd.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <sys/wait.h>

#ifndef CLOSE_RANGE_CLOEXEC
#define CLOSE_RANGE_CLOEXEC (1U << 2)
#endif
#ifndef SYS_close_range
#define SYS_close_range 436 /* the same number on x86_64 and arm64 */
#endif

/*
 * The kernel's interfaces this program uses, from its UAPI (linux/capability.h,
 * linux/filter.h, linux/seccomp.h, linux/securebits.h), spelled out here so
 * that a libc without the kernel's headers (musl) builds it too.
 */
#define SECCOMP_SET_MODE_FILTER 1
#define LINUX_CAPABILITY_VERSION_3 0x20080522
#define SECBIT_NOROOT (1 << 0)
#define SECBIT_NOROOT_LOCKED (1 << 1)
#define SECBIT_NO_SETUID_FIXUP (1 << 2)
#define SECBIT_NO_SETUID_FIXUP_LOCKED (1 << 3)
#define SECBIT_KEEP_CAPS_LOCKED (1 << 5)
#define SECBIT_NO_CAP_AMBIENT_RAISE (1 << 6)
#define SECBIT_NO_CAP_AMBIENT_RAISE_LOCKED (1 << 7)

struct cap_header {
	uint32_t version;
	int pid;
};

struct cap_data {
	uint32_t effective;
	uint32_t permitted;
	uint32_t inheritable;
};

struct sock_filter {
	uint16_t code;
	uint8_t jt;
	uint8_t jf;
	uint32_t k;
};

struct sock_fprog {
	unsigned short len;
	struct sock_filter *filter;
};

/*
 * The bits the Go wall locks: neither uid 0 nor a setuid transition may give
 * capabilities back, and none may be made ambient.
 */
#define LOCKED_SECUREBITS                                                    \
	(SECBIT_NOROOT | SECBIT_NOROOT_LOCKED | SECBIT_NO_SETUID_FIXUP |     \
	 SECBIT_NO_SETUID_FIXUP_LOCKED | SECBIT_KEEP_CAPS_LOCKED |           \
	 SECBIT_NO_CAP_AMBIENT_RAISE | SECBIT_NO_CAP_AMBIENT_RAISE_LOCKED)

enum { SETUP = 1, GO = 2, SIGNAL = 3 };                /* parent -> pid1 */
enum { READY = 1, STARTED = 2, FAILED = 3, DONE = 4 }; /* pid1 -> parent */
enum { STEP_RECORD = 1, STEP_FORK = 2, STEP_PIDMAX = 3, STEP_OTHER = 4, STEP_NETNS = 5 };

struct hdr {
	uint32_t type;
	int32_t a;
	int32_t b;
	uint32_t len;
};

#define CTL 3
#define MAXPATH 4096
#define MAXINSNS 4096

static unsigned char rec[sizeof(struct hdr) + MAXPATH +
			 MAXINSNS * sizeof(struct sock_filter)];
static struct sock_filter insns[MAXINSNS];
static const char *dir;
static unsigned long long nproc;
static int own_userns; /* -userns: the command gets a user namespace of its own */
static char **cmd_argv;
static pid_t cmd; /* the command's pid once it has started */

/*
 * A small buffered writer on fd 2. The child uses it between fork and exec,
 * so it only calls write(2) and never allocates.
 */
static char ob[1024];
static size_t on;

static void oflush(void)
{
	size_t off = 0;
	while (off < on) {
		ssize_t n = write(2, ob + off, on - off);
		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0)
			break;
		off += n;
	}
	on = 0;
}

static void oput(const char *s, size_t n)
{
	while (n > 0) {
		if (on == sizeof ob)
			oflush();
		size_t k = sizeof ob - on < n ? sizeof ob - on : n;
		memcpy(ob + on, s, k);
		on += k, s += k, n -= k;
	}
}

/* Buffers its NULL-terminated list of strings; the caller flushes. */
static void say(const char *s, ...)
{
	va_list ap;
	va_start(ap, s);
	for (; s; s = va_arg(ap, const char *))
		oput(s, strlen(s));
	va_end(ap);
}

/* Go's error strings start lower case: "permission denied". */
static void say_err(int err)
{
	const char *m = strerror(err);
	char c = tolower((unsigned char)m[0]);
	oput(&c, 1);
	say(m + 1, NULL);
}

/* Bad invocation: nothing has started yet, so there is nothing to kill. */
static void usage(const char *what, const char *arg)
{
	say("postern: wall pid1: ", what, arg, "\n", NULL);
	oflush();
	exit(125);
}

static void send_rec(uint32_t type, int32_t a, int32_t b)
{
	struct hdr h = { type, a, b, 0 };
	while (send(CTL, &h, sizeof h, MSG_NOSIGNAL) < 0 && errno == EINTR)
		;
}

/*
 * Kill every other process of the namespace and reap them. As pid 1,
 * kill(-1) reaches all of them and every orphan is our child, so an ESRCH
 * once nothing is left to wait for means the namespace is empty.
 */
static int kill_and_reap(void)
{
	kill(-1, SIGKILL);
	for (int round = 0; round < 16; round++) {
		int st;
		while (waitpid(-1, &st, __WALL) > 0 || errno == EINTR)
			;
		if (kill(-1, SIGKILL) < 0 && errno == ESRCH)
			return 1;
	}
	return 0;
}

static void fail(int step, int err)
{
	send_rec(FAILED, step, err);
	kill_and_reap();
	exit(125);
}

static void parent_gone(void)
{
	kill_and_reap();
	exit(137);
}

static int set_pid_max(int v)
{
	char s[16];
	int n = snprintf(s, sizeof s, "%d\n", v);
	int fd = open("/proc/sys/kernel/pid_max", O_WRONLY | O_CLOEXEC);
	if (fd < 0)
		return errno;
	ssize_t w;
	while ((w = write(fd, s, n)) < 0 && errno == EINTR)
		;
	int err = w < 0 ? errno : w != n ? EIO : 0;
	close(fd);
	return err;
}

/* write_file writes data to the file at path, as one write. */
static int write_file(const char *path, const char *data)
{
	int fd = open(path, O_WRONLY | O_CLOEXEC);
	if (fd < 0)
		return -1;
	size_t n = strlen(data);
	ssize_t w = write(fd, data, n);
	int saved = errno;
	close(fd);
	errno = saved;
	return w == (ssize_t)n ? 0 : -1;
}

/*
 * map_own_ids maps uid and gid, the caller's ids before its unshare of a user
 * namespace, to themselves in it and nothing else, setgroups denied. It
 * returns what failed (errno says why), or NULL.
 */
static const char *map_own_ids(unsigned long uid, unsigned long gid)
{
	char map[64];
	if (write_file("/proc/self/setgroups", "deny") < 0)
		return "deny setgroups";
	snprintf(map, sizeof map, "%lu %lu 1\n", uid, uid);
	if (write_file("/proc/self/uid_map", map) < 0)
		return "map the uid";
	snprintf(map, sizeof map, "%lu %lu 1\n", gid, gid);
	if (write_file("/proc/self/gid_map", map) < 0)
		return "map the gid";
	return NULL;
}

/* A failure in the child before exec: the command exits 126, like a shell. */
static void child_fail(const char *step, int err)
{
	say("postern: wall pid1: ", step, err ? ": " : "", NULL);
	if (err)
		say_err(err);
	say("\n", NULL);
	oflush();
	_exit(126);
}

static void drop_privileges(void)
{
	if (prctl(PR_SET_SECUREBITS, LOCKED_SECUREBITS, 0, 0, 0) < 0)
		child_fail("lock securebits", errno);
	for (unsigned long c = 0;; c++) {
		if (prctl(PR_CAPBSET_DROP, c, 0, 0, 0) == 0)
			continue;
		if (errno == EINVAL)
			break; /* past the last capability this kernel knows */
		child_fail("drop capability from the bounding set", errno);
	}
	if (prctl(PR_CAP_AMBIENT, PR_CAP_AMBIENT_CLEAR_ALL, 0, 0, 0) < 0)
		child_fail("clear ambient capabilities", errno);
	struct cap_header h = { LINUX_CAPABILITY_VERSION_3, 0 };
	struct cap_data none[2], got[2];
	memset(none, 0, sizeof none);
	if (syscall(SYS_capset, &h, none) < 0)
		child_fail("clear capabilities", errno);
	if (prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) < 0)
		child_fail("set no_new_privs", errno);
	memset(got, 0xff, sizeof got);
	if (syscall(SYS_capget, &h, got) < 0)
		child_fail("read capabilities back", errno);
	if (memcmp(got, none, sizeof got) != 0)
		child_fail("capabilities remain after dropping them", 0);
}

/* Only fds 0, 1 and 2 may reach the command. */
static void cloexec_inherited(void)
{
	if (syscall(SYS_close_range, 3, ~0U, CLOSE_RANGE_CLOEXEC) == 0)
		return;
	if (errno != ENOSYS && errno != EINVAL)
		child_fail("mark descriptors close-on-exec", errno);
	DIR *d = opendir("/proc/self/fd");
	if (!d)
		child_fail("list /proc/self/fd", errno);
	struct dirent *e;
	while ((e = readdir(d)) != NULL) {
		int fd = atoi(e->d_name);
		if (fd > 2 && fd != dirfd(d) && fcntl(fd, F_SETFD, FD_CLOEXEC) < 0)
			child_fail("mark descriptors close-on-exec", errno);
	}
	closedir(d);
}

static void child(const char *path, const struct sock_fprog *prog)
{
	struct sigaction sa = { .sa_handler = SIG_DFL };
	sigset_t none;
	for (int s = 1; s < NSIG; s++) /* EINVAL: SIGKILL, SIGSTOP, libc's own */
		if (sigaction(s, &sa, NULL) < 0 && errno != EINVAL)
			child_fail("reset signal handlers", errno);
	sigemptyset(&none);
	if (sigprocmask(SIG_SETMASK, &none, NULL) < 0)
		child_fail("unblock signals", errno);
	if (setsid() < 0)
		child_fail("setsid", errno);
	if (dir && chdir(dir) < 0)
		child_fail("chdir", errno);
	if (own_userns) {
		/*
		 * postern is in a user namespace of its own (its launch mode):
		 * the command gets one below it, with the same ids, so that
		 * RLIMIT_NPROC counts the command's processes alone (the kernel
		 * counts per user namespace), not postern's threads too, and the
		 * command shares no user namespace with postern.
		 */
		unsigned long uid = getuid(), gid = getgid();
		if (unshare(CLONE_NEWUSER) < 0)
			child_fail("make the command's user namespace", errno);
		/*
		 * Not dumpable (pid 1's), /proc/self is root's and its maps are
		 * not the command's to write. The command's exec makes it
		 * dumpable in any case.
		 */
		if (prctl(PR_SET_DUMPABLE, 1, 0, 0, 0) < 0)
			child_fail("prctl PR_SET_DUMPABLE", errno);
		const char *failed = map_own_ids(uid, gid);
		if (failed)
			child_fail(failed, errno);
	}
	if (nproc > 0) {
		struct rlimit rl = { nproc, nproc };
		if (setrlimit(RLIMIT_NPROC, &rl) < 0)
			child_fail("set RLIMIT_NPROC", errno);
	}
	drop_privileges();
	if (prog && syscall(SYS_seccomp, SECCOMP_SET_MODE_FILTER, 0, prog) < 0)
		child_fail("install seccomp filter", errno);
	cloexec_inherited();

	if (path[0] == '\0') { /* the parent found no such command in PATH */
		const char *p = getenv("PATH");
		say("postern: command not found: \"", NULL);
		for (const char *s = cmd_argv[0]; *s; s++) {
			if (*s == '"' || *s == '\\')
				oput("\\", 1);
			oput(s, 1);
		}
		say("\" in PATH=", p ? p : "", "\n", NULL);
		oflush();
		_exit(127);
	}
	execve(path, cmd_argv, environ);
	int err = errno;
	if (err == ENOENT) {
		say("postern: command not found: ", path, NULL);
	} else {
		say("postern: exec ", path, ": ", NULL);
		say_err(err);
	}
	say("\n", NULL);
	oflush();
	_exit(err == ENOENT ? 127 : 126);
}

static void start(const struct hdr *h, const unsigned char *p)
{
	if (h->a < 1 || h->a > MAXPATH || (uint32_t)h->a > h->len)
		fail(STEP_RECORD, EPROTO);
	const char *path = (const char *)p;
	if (memchr(path, 0, h->a) != path + h->a - 1)
		fail(STEP_RECORD, EPROTO); /* not one NUL-terminated string */
	size_t fbytes = h->len - h->a;
	if (fbytes % sizeof(struct sock_filter) ||
	    fbytes / sizeof(struct sock_filter) > MAXINSNS)
		fail(STEP_RECORD, EPROTO);
	memcpy(insns, p + h->a, fbytes);
	struct sock_fprog prog = { fbytes / sizeof(struct sock_filter), insns };

	int pfd[2];
	if (pipe2(pfd, O_CLOEXEC) < 0)
		fail(STEP_OTHER, errno);
	pid_t pid = fork();
	if (pid < 0)
		fail(STEP_FORK, errno);
	if (pid == 0) {
		close(pfd[0]);
		child(path, prog.len ? &prog : NULL);
	}
	close(pfd[1]);
	/* EOF once the child has exec'd (closing the write end) or exited. */
	char c;
	ssize_t n;
	while ((n = read(pfd[0], &c, 1)) > 0 || (n < 0 && errno == EINTR))
		;
	close(pfd[0]);
	cmd = pid;
	send_rec(STARTED, pid, 0);
}

static void on_record(void)
{
	static int setup_done;
	/*
	 * With MSG_TRUNC a datagram socket returns the record's full length.
	 * A descriptor may come with it (setup: the run's network namespace).
	 */
	union {
		struct cmsghdr h;
		char buf[CMSG_SPACE(sizeof(int))];
	} cm;
	struct iovec iov = { rec, sizeof rec };
	struct msghdr mh = { .msg_iov = &iov, .msg_iovlen = 1,
			     .msg_control = cm.buf, .msg_controllen = sizeof cm.buf };
	ssize_t n = recvmsg(CTL, &mh, MSG_DONTWAIT | MSG_TRUNC | MSG_CMSG_CLOEXEC);
	if (n < 0 && (errno == EINTR || errno == EAGAIN))
		return;
	if (n <= 0)
		parent_gone();
	int fd = -1;
	struct cmsghdr *c = CMSG_FIRSTHDR(&mh);
	if (c && c->cmsg_level == SOL_SOCKET && c->cmsg_type == SCM_RIGHTS &&
	    c->cmsg_len == CMSG_LEN(sizeof(int)))
		memcpy(&fd, CMSG_DATA(c), sizeof fd);
	else if (c || (mh.msg_flags & MSG_CTRUNC))
		fail(STEP_RECORD, EPROTO);
	struct hdr h;
	if ((size_t)n < sizeof h || (size_t)n > sizeof rec)
		fail(STEP_RECORD, EPROTO);
	memcpy(&h, rec, sizeof h);
	if (h.len != (size_t)n - sizeof h)
		fail(STEP_RECORD, EPROTO);
	if (fd >= 0 && h.type != SETUP) /* only setup carries one */
		fail(STEP_RECORD, EPROTO);
	switch (h.type) {
	case SETUP:
		if (setup_done || h.a < 0)
			fail(STEP_RECORD, EPROTO);
		setup_done = 1;
		/*
		 * The run's network namespace, made beside the mounts: pid 1,
		 * and so the command, joins it before anything of the run
		 * starts. Until then pid 1 is in its parent's, which no run
		 * may have: a setup without one is refused.
		 */
		if (fd < 0)
			fail(STEP_NETNS, EBADF);
		if (setns(fd, CLONE_NEWNET) < 0)
			fail(STEP_NETNS, errno);
		close(fd);
		send_rec(READY, h.a > 0 ? set_pid_max(h.a) : 0, 0);
		break;
	case GO:
		if (!setup_done || cmd > 0)
			fail(STEP_RECORD, EPROTO);
		start(&h, rec + sizeof h);
		break;
	case SIGNAL:
		if (cmd > 0)
			kill(-cmd, h.a);
		break;
	default:
		fail(STEP_RECORD, EPROTO);
	}
}

static void finish(int st)
{
	int reaped = kill_and_reap();
	send_rec(DONE, st, reaped);
	exit(WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st));
}

static void on_signals(int sfd)
{
	struct signalfd_siginfo si[16];
	for (;;) {
		ssize_t n = read(sfd, si, sizeof si);
		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0 && errno == EAGAIN)
			return;
		if (n <= 0)
			fail(STEP_OTHER, n < 0 ? errno : EIO);
		for (size_t i = 0; i < n / sizeof si[0]; i++) {
			int sig = si[i].ssi_signo;
			if (sig == SIGCHLD) {
				int st;
				pid_t p;
				while ((p = waitpid(-1, &st, WNOHANG | __WALL)) > 0)
					if (p == cmd && (WIFEXITED(st) || WIFSIGNALED(st)))
						finish(st);
				continue;
			}
			switch (sig) {
			case SIGINT: case SIGTERM: case SIGHUP: case SIGQUIT:
			case SIGUSR1: case SIGUSR2: case SIGWINCH: case SIGCONT:
			case SIGTSTP:
				if (cmd > 0)
					kill(-cmd, sig);
			}
		}
	}
}

/*
 * Launch mode: "pid1 -launch FD CAPS -- ARGV...". postern, run by a user
 * without privileges, execs this first thing, so that one thread, with no Go
 * runtime, makes a user namespace of its own: the caller's uid and gid mapped
 * to themselves and nothing else, setgroups denied. The capabilities in CAPS
 * (hexadecimal, bit N for capability N) are kept across the exec as
 * inheritable and ambient ones, and the executable open on FD (postern's own)
 * is exec'd with ARGV and this environment. postern then holds those
 * capabilities in a namespace that owns nothing of the host's and sets its
 * run's wall up itself.
 *
 * Where the kernel refuses the namespace, postern is exec'd all the same, as
 * it was, and takes the lane it would have. A namespace made but not mapped
 * would leave postern nobody: that ends here, saying so.
 */
static void launch_fail(const char *what)
{
	say("postern: launch in a user namespace of its own: ", what, ": ", strerror(errno),
	    " (POSTERN_WALL_INIT=go runs without one)\n", NULL);
	oflush();
	exit(126);
}

static int launch(int argc, char **argv)
{
	if (argc < 6 || strcmp(argv[4], "--") != 0)
		usage("usage: pid1 -launch FD CAPS -- ARGV0 [ARGS...]", "");
	char *end;
	errno = 0;
	long fd = strtol(argv[2], &end, 10);
	if (!isdigit((unsigned char)argv[2][0]) || *end || errno || fd < 3 || fd > 1 << 20)
		usage("bad -launch descriptor ", argv[2]);
	errno = 0;
	unsigned long long caps = strtoull(argv[3], &end, 16);
	if (!isxdigit((unsigned char)argv[3][0]) || *end || errno)
		usage("bad -launch capabilities ", argv[3]);
	if (fcntl((int)fd, F_SETFD, FD_CLOEXEC) < 0)
		usage("no executable on the -launch descriptor: ", strerror(errno));

	unsigned long uid = getuid(), gid = getgid();
	if (unshare(CLONE_NEWUSER) == 0) {
		const char *failed = map_own_ids(uid, gid);
		if (failed)
			launch_fail(failed);
		/*
		 * A new user namespace's first process holds every capability
		 * there; an exec by a uid other than 0 keeps only the ambient
		 * ones, which must be inheritable (and permitted) first.
		 */
		struct cap_header h = { LINUX_CAPABILITY_VERSION_3, 0 };
		struct cap_data d[2];
		if (syscall(SYS_capget, &h, d) < 0)
			launch_fail("read capabilities");
		d[0].inheritable = (uint32_t)caps & d[0].permitted;
		d[1].inheritable = (uint32_t)(caps >> 32) & d[1].permitted;
		if (syscall(SYS_capset, &h, d) < 0)
			launch_fail("make capabilities inheritable");
		for (int c = 0; c < 64; c++) {
			if (!(caps >> c & 1))
				continue;
			if (prctl(PR_CAP_AMBIENT, PR_CAP_AMBIENT_RAISE, c, 0, 0) < 0)
				launch_fail("keep capabilities across exec");
		}
	}
	syscall(SYS_execveat, (int)fd, "", argv + 5, environ, AT_EMPTY_PATH);
	launch_fail("exec postern");
	return 126;
}

int main(int argc, char **argv)
{
	if (argc > 1 && strcmp(argv[1], "-launch") == 0)
		return launch(argc, argv);
	/* No core dumps and no ptrace or /proc access from the command's uid. */
	if (prctl(PR_SET_DUMPABLE, 0, 0, 0, 0) < 0)
		usage("prctl PR_SET_DUMPABLE: ", strerror(errno));
	int i;
	for (i = 1; i < argc && strcmp(argv[i], "--") != 0; i++) {
		if (strcmp(argv[i], "-dir") == 0 && i + 1 < argc) {
			dir = argv[++i];
		} else if (strcmp(argv[i], "-userns") == 0) {
			own_userns = 1;
		} else if (strcmp(argv[i], "-nproc") == 0 && i + 1 < argc) {
			const char *s = argv[++i];
			char *end;
			errno = 0;
			nproc = strtoull(s, &end, 10);
			if (!isdigit((unsigned char)s[0]) || *end || errno)
				usage("bad -nproc ", s);
		} else {
			usage("bad argument ", argv[i]);
		}
	}
	if (i + 1 >= argc)
		usage("usage: pid1 [-dir DIR] [-nproc N] [-userns] -- ARGV0 [ARGS...]", "");
	cmd_argv = argv + i + 1;
	if (fcntl(CTL, F_SETFD, FD_CLOEXEC) < 0)
		usage("no control socket on fd 3: ", strerror(errno));

	/* Signals arrive only through the signalfd, SIGCHLD included. */
	sigset_t all;
	sigfillset(&all);
	if (sigprocmask(SIG_BLOCK, &all, NULL) < 0)
		fail(STEP_OTHER, errno);
	int sfd = signalfd(-1, &all, SFD_CLOEXEC | SFD_NONBLOCK);
	if (sfd < 0)
		fail(STEP_OTHER, errno);

	for (;;) {
		struct pollfd pf[2] = { { CTL, POLLIN, 0 }, { sfd, POLLIN, 0 } };
		if (poll(pf, 2, -1) < 0) {
			if (errno == EINTR)
				continue;
			fail(STEP_OTHER, errno);
		}
		short ev = pf[0].revents;
		if ((ev & POLLNVAL) || ((ev & (POLLHUP | POLLERR)) && !(ev & POLLIN)))
			parent_gone();
		if (ev)
			on_record(); /* queued records are read before a hangup */
		if (pf[1].revents)
			on_signals(sfd);
	}
}
