package seatbelt

import (
	"errors"
	"fmt"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"unicode/utf8"

	"github.com/postern-dev/postern/door/policy"
)

// ProfileSpec is what a run's profile is made from.
type ProfileSpec struct {
	// Run is the run's id; it and the policy are named in the profile's
	// header, for a person reading it.
	Run    string
	Policy *policy.Policy
	// DoorPort is the door's proxy port on 127.0.0.1: the one network
	// destination the run may connect to.
	DoorPort uint16
	// Places say where the run may write and bind sockets (see Places).
	Places Places
}

// Places are the directories a run works in, as real paths (symbolic links
// resolved: the sandbox matches the paths the kernel sees, /private/tmp and
// not /tmp).
type Places struct {
	// Writable are directories the run may write in, with everything below.
	Writable []string
	// Guarded are paths the run may never write, create, remove or rename,
	// with everything below them, even inside Writable: the files programs
	// outside the sandbox obey (shell startup files, git's configuration
	// and hooks, ssh's configuration, login items), postern's records and
	// its agent. They need not exist: the run cannot create them either.
	Guarded []string
	// Sockets are directories in which the run may bind and connect unix
	// sockets: its own temporary directory. No other unix socket is open to
	// it but the system log's.
	Sockets []string
}

// ErrNoDoorPort is a profile asked for without the door's port.
var ErrNoDoorPort = errors.New("seatbelt profile: the door's port is 0; open the door's listener first")

// Profile returns the SBPL profile for a run. It denies everything by
// default and allows, rule by rule, what programs need to run, each with the
// reason; see the comments in the profile itself. A path that cannot be
// written in SBPL safely is an error naming it.
//
// Why deny by default, rather than allow by default and deny network*: with
// everything else allowed, the run could ask a system service outside the
// sandbox to make its connections for it. mDNSResponder resolves any name
// (a DNS query is itself a way out), nsurlsessiond downloads on a process's
// behalf, launchd starts jobs the run submits, and LaunchServices opens apps
// (a terminal with a command) that are not sandboxed at all. The kernel would
// deny the run's own sockets while those go out past the door. Denying by
// default closes every Mach service but the few listed, which is also what
// Codex and sandbox-runtime do on macOS.
func Profile(spec ProfileSpec) (string, error) {
	if spec.DoorPort == 0 {
		return "", ErrNoDoorPort
	}
	p := &profileWriter{}
	port := strconv.Itoa(int(spec.DoorPort))

	p.line("(version 1)")
	p.comment("postern connect-door profile for run %s", spec.Run)
	if pol := spec.Policy; pol != nil {
		name := pol.Source
		if name == "" {
			name = "(none)"
		}
		ports := make([]string, len(pol.Ports))
		for i, pt := range pol.Ports {
			ports[i] = strconv.Itoa(int(pt))
		}
		p.comment("policy %s: mode %s, ports %s; the door judges every connection by it", name, pol.Mode, strings.Join(ports, ", "))
	}
	p.comment("The run reaches the network only through the door at 127.0.0.1:%s. In", port)
	p.comment("observe mode too: what does not pass the door is not recorded, so it is denied.")
	p.comment("Later rules win over earlier ones.")
	p.line("(deny default)")

	p.section("Processes")
	p.comment("Its own programs, which inherit this profile.")
	p.line("(allow process-fork)")
	p.line("(allow process-exec)")
	p.comment("Signals, process information and task ports only within the run (kill, ps, a debugger).")
	p.line("(allow signal (target same-sandbox))")
	p.line("(allow process-info* (target same-sandbox))")
	p.line("(allow mach-priv-task-port (target same-sandbox))")
	p.comment("Processor facts: libuv (Node's os.cpus()) asks the host port for them.")
	p.line("(allow mach-host*)")

	p.section("Reading")
	p.comment("Files read as they are, as they do behind the Linux wall.")
	p.line("(allow file-read*)")
	p.comment("Kernel facts (hw.*, kern.*): runtimes size themselves by them; nothing leaves.")
	p.line("(allow sysctl-read)")
	p.comment("Two sysctls that runtimes write to read: V8 (kern.tcsm_enable) and the JVM (kern.grade_cputype).")
	p.line("(allow sysctl-write (sysctl-name \"kern.tcsm_enable\") (sysctl-name \"kern.grade_cputype\"))")
	p.comment("Preferences may be read (CFPreferences); writing them stays denied, since apps outside obey them.")
	p.line("(allow user-preference-read)")

	p.section("System services")
	p.comment("Each Mach service the run may ask for, and why. Absent on purpose:")
	p.comment("mDNSResponder (name lookups are the door's: a lookup is a way out by itself),")
	p.comment("nsurlsessiond and networkd (connections made on the run's behalf), ocspd (fetches")
	p.comment("outside the door), launchd job submission and LaunchServices (they start programs")
	p.comment("outside the sandbox), cfprefsd writes, SecurityServer (the keychain's stored secrets).")
	p.line("(allow mach-lookup")
	p.comment("  Users and groups: getpwuid, id, ls -l, git, ssh.")
	p.line("  (global-name \"com.apple.system.opendirectoryd.libinfo\")")
	p.line("  (global-name \"com.apple.system.opendirectoryd.membership\")")
	p.comment("  The per-user temporary and cache directories (confstr).")
	p.line("  (global-name \"com.apple.bsd.dirhelper\")")
	p.comment("  notify(3), which libSystem uses for time zone and other changes.")
	p.line("  (global-name \"com.apple.system.notification_center\")")
	p.comment("  The system log (os_log, asl): it stays on this machine.")
	p.line("  (global-name \"com.apple.logd\")")
	p.line("  (global-name \"com.apple.system.logger\")")
	p.comment("  Power assertions (caffeinate, builds that keep the machine awake): local state.")
	p.line("  (global-name \"com.apple.PowerManagement.control\")")
	p.comment("  Certificate trust. Go's crypto/x509 verifies every TLS certificate through")
	p.comment("  trustd on macOS, and Node does with the system store (--use-system-ca); without")
	p.comment("  it they fail with OSStatus -26276. trustd may fetch the OCSP responses, CRLs and")
	p.comment("  intermediate certificates a certificate names, itself, not through the door:")
	p.comment("  a run can make it fetch a URL of its choosing. That is the one way past the")
	p.comment("  door this profile leaves open, and the door records nothing of it.")
	p.line("  (global-name \"com.apple.trustd\")")
	p.line("  (global-name \"com.apple.trustd.agent\"))")
	p.comment("Power management's IOKit client, which the assertions above go through.")
	p.line("(allow iokit-open (iokit-registry-entry-class \"RootDomainUserClient\"))")
	p.comment("POSIX semaphores and shared memory between the run's processes (Python's multiprocessing).")
	p.line("(allow ipc-posix-sem)")
	p.line("(allow ipc-posix-shm*)")

	p.section("Terminals and devices")
	p.comment("The run's terminal, and terminals it opens itself (script, expect, tmux).")
	p.line("(allow pseudo-tty)")
	p.line("(allow file-read* file-write* file-ioctl (literal \"/dev/ptmx\") (regex \"^/dev/ttys[0-9]+$\"))")
	p.comment("The devices every program writes to, and its own descriptors.")
	p.line("(allow file-write* file-ioctl (literal \"/dev/null\") (literal \"/dev/zero\") (literal \"/dev/tty\") (literal \"/dev/dtracehelper\") (subpath \"/dev/fd\"))")

	p.section("Network")
	p.comment("Out: the door's port on loopback and nothing else. localhost is 127.0.0.1 and")
	p.comment("::1; postern holds [::1] on the same port, so no other program can listen there.")
	p.line("(allow network-outbound (remote ip \"localhost:" + port + "\"))")
	p.comment("In: the run may serve on loopback (a dev server); it still cannot connect to")
	p.comment("other loopback ports, which are the host's services, not the run's.")
	p.line("(allow network-bind network-inbound (local ip \"localhost:*\"))")
	p.comment("Unix sockets: creating them, and binding and connecting only in the run's own")
	p.comment("directories; of the host's, only the system log's (syslog(3)). Not mDNSResponder's,")
	p.comment("ssh-agent's, docker's or any other service's: each would be a way around the door.")
	p.line("(allow system-socket (socket-domain AF_UNIX))")
	p.line("(allow network-outbound (literal \"/private/var/run/syslog\"))")
	for _, d := range spec.Places.Sockets {
		q, err := Quote(filepath.Clean(d))
		if err != nil {
			return "", fmt.Errorf("socket directory: %w", err)
		}
		p.line("(allow network-bind (local unix-socket (subpath " + q + ")))")
		p.line("(allow network-outbound (remote unix-socket (subpath " + q + ")))")
	}

	p.section("Writing")
	p.comment("Where the run works: its working directory and repository, its home, its")
	p.comment("temporary directories.")
	if len(spec.Places.Writable) > 0 {
		p.line("(allow file-write*")
		for i, w := range spec.Places.Writable {
			q, err := Quote(filepath.Clean(w))
			if err != nil {
				return "", fmt.Errorf("writable directory: %w", err)
			}
			end := ""
			if i == len(spec.Places.Writable)-1 {
				end = ")"
			}
			p.line("  (subpath " + q + ")" + end)
		}
	}
	guarded := make([]string, 0, len(spec.Places.Guarded))
	for _, g := range spec.Places.Guarded {
		g = filepath.Clean(g)
		if !slices.Contains(guarded, g) {
			guarded = append(guarded, g)
		}
	}
	if len(guarded) > 0 {
		p.comment("Never: files that programs outside obey, postern's records and agent; with")
		p.comment("everything below them, in either letter case.")
		p.line("(deny file-write*")
		for i, g := range guarded {
			if err := p.regexes(pathRegex(g, true), i == len(guarded)-1); err != nil {
				return "", fmt.Errorf("guarded path: %w", err)
			}
		}
		p.comment("Nor may a directory above them be moved: a moved directory's files are no")
		p.comment("longer at the guarded paths, and can be changed and moved back.")
		var ancestors []string
		for _, g := range guarded {
			for a := filepath.Dir(g); a != filepath.Dir(a); a = filepath.Dir(a) {
				if !slices.Contains(ancestors, a) {
					ancestors = append(ancestors, a)
				}
			}
		}
		slices.Sort(ancestors)
		p.line("(deny file-write-unlink")
		for i, a := range ancestors {
			if err := p.regexes(pathRegex(a, false), i == len(ancestors)-1); err != nil {
				return "", fmt.Errorf("directory above a guarded path: %w", err)
			}
		}
	}
	return p.b.String(), p.err
}

type profileWriter struct {
	b   strings.Builder
	err error
}

func (p *profileWriter) line(s string) {
	p.b.WriteString(s)
	p.b.WriteByte('\n')
}

func (p *profileWriter) section(name string) {
	p.b.WriteString("\n;; " + name + "\n")
}

// comment writes one comment line. Whatever it names (a policy's file name,
// a run id) is shown with control characters replaced: a newline would end
// the comment and make the rest of it profile.
func (p *profileWriter) comment(format string, args ...any) {
	s := fmt.Sprintf(format, args...)
	s = strings.Map(func(r rune) rune {
		if r < 0x20 || r == 0x7f || r == utf8.RuneError {
			return '?'
		}
		return r
	}, s)
	p.b.WriteString("; " + s + "\n")
}

func (p *profileWriter) regexes(res []string, last bool) error {
	for i, re := range res {
		q, err := Quote(re)
		if err != nil {
			return err
		}
		end := ""
		if last && i == len(res)-1 {
			end = ")"
		}
		p.line("  (regex " + q + ")" + end)
	}
	return nil
}
