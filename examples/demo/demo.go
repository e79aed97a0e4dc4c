//go:build linux

package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"time"

	"github.com/postern-dev/postern/internal/testhosts"
)

// config is what one demo needs.
type config struct {
	Postern string // the built postern binary
	Root    string // the module root: holds examples/
	State   string // POSTERN_HOME for the demo's records
}

// attempt is one thing the agent tries, and what must happen to it.
type attempt struct {
	ID   string
	Want string // "OK": the test host answered; "BLOCKED": refused on the way
	Why  string // what the policy and the wall make of it
}

// attempts are the lines examples/demo/agent.sh prints, in its order.
var attempts = []attempt{
	{"allowed-tls", "OK", "allowed by name, over HTTPS"},
	{"allowed-http", "OK", "the same name over plain HTTP"},
	{"subdomain", "OK", "an allowed name covers its subdomains"},
	{"deny-wins", "BLOCKED", "a deny rule beats the allow of its parent; the wall's DNS answered NXDOMAIN"},
	{"forbidden", "BLOCKED", "no allow rule names it; the wall's DNS answered NXDOMAIN"},
	{"private-ip", "BLOCKED", "a private address outside allow_cidrs; the door answered 403"},
	{"metadata", "BLOCKED", "the hard floor (cloud metadata), which no policy opens"},
	{"other-port", "BLOCKED", "a port the policy does not list; the wall reset the connection and recorded why"},
	{"dns-exfil", "BLOCKED", "DNS to any address reaches the door's resolver; a refused name is never looked up"},
	{"env-i", "OK", "no environment, no proxy variables: still walled, still reaches the allowed host"},
}

// Names the demo's DNS server knows. Those the policy refuses must never be
// asked of it: the door answers them itself and never resolves them.
const (
	nameAllowed   = "allowed.demo.test"
	nameAPI       = "api.allowed.demo.test"
	nameDenied    = "denied.allowed.demo.test"
	nameForbidden = "forbidden.demo.test"
	nameExfil     = "secret-data.exfil.demo.test"
)

// errUnexpected means an attempt ended otherwise than the policy says it must.
var errUnexpected = errors.New("the demo saw something unexpected")

// demo runs the whole demo, writing what happens to w. It returns an error
// wrapping errUnexpected if an allowed attempt was blocked, a refused one got
// through, or a refused name reached the DNS server.
func demo(ctx context.Context, cfg config, w io.Writer) error {
	if os.Geteuid() != 0 {
		return fmt.Errorf("the demo makes test hosts (network namespaces) and raises a wall: run it as root, e.g. 'sudo make demo'")
	}
	for _, p := range []*string{&cfg.Postern, &cfg.Root, &cfg.State} {
		abs, err := filepath.Abs(*p)
		if err != nil {
			return err
		}
		*p = abs
	}
	if err := os.MkdirAll(cfg.State, 0o755); err != nil {
		return fmt.Errorf("make the demo's state directory: %w", err)
	}
	env := append(os.Environ(), "POSTERN_HOME="+cfg.State)
	show := func(p string) string { return relTo(cfg.Root, p) }

	heading(w, "postern demo")
	fmt.Fprintf(w, "Records go to %s (POSTERN_HOME). Explore them afterwards:\n", show(cfg.State))
	fmt.Fprintf(w, "  POSTERN_HOME=%s %s runs list\n", show(cfg.State), show(cfg.Postern))

	// 1. Measure the machine: a run is refused on a machine never measured.
	heading(w, "1. Measure this machine")
	fmt.Fprintln(w, "$ postern machine probe-confinement local")
	out, err := command(ctx, cfg, env, nil, "machine", "probe-confinement", "local")
	indent(w, out)
	if err != nil {
		return fmt.Errorf("probe-confinement: %w", err)
	}

	// 2. Test hosts.
	heading(w, "2. Start test hosts (network namespaces on this machine, nothing beyond it)")
	if err := testhosts.Sweep(); err != nil {
		fmt.Fprintf(w, "note: leftovers of an earlier run could not all be removed: %v\n", err)
	}
	lab, err := testhosts.NewLab(ctx, "demo")
	if err != nil {
		return err
	}
	defer lab.Close()
	hosts, err := startHosts(ctx, lab)
	if err != nil {
		return err
	}
	for _, h := range hosts.list {
		fmt.Fprintf(w, "  %-10s %-12s %s\n", h.name, h.addr, h.what)
	}
	// The agent works in a directory of its own beside the records, which a
	// run may never read or write; the wall gives it a private /tmp, so the
	// lab's CA file goes there too.
	work := strings.TrimRight(cfg.State, "/") + "-work"
	if err := os.MkdirAll(work, 0o755); err != nil {
		return err
	}
	ca := filepath.Join(work, "demo-ca.pem")
	if err := copyFile(lab.CAFile(), ca); err != nil {
		return err
	}

	// 3. The policy, with allow_cidrs pointed at this lab's allowed host.
	heading(w, "3. The policy")
	src, err := os.ReadFile(filepath.Join(cfg.Root, "examples", "policies", "demo.hcl"))
	if err != nil {
		return fmt.Errorf("read the demo policy: %w", err)
	}
	polText, err := rewriteCIDRs(string(src), hosts.allowed.Prefix)
	if err != nil {
		return err
	}
	pol := filepath.Join(cfg.State, "demo.hcl")
	if err := os.WriteFile(pol, []byte(polText), 0o644); err != nil {
		return fmt.Errorf("write the demo policy: %w", err)
	}
	fmt.Fprintf(w, "%s: examples/policies/demo.hcl with allow_cidrs set to this run's allowed host (%s)\n\n", show(pol), hosts.allowed.Prefix)
	indent(w, policyBody(polText))

	// 4. The agent behind the wall.
	heading(w, "4. Run the agent behind the wall")
	// The run gets a private /tmp, so a checkout under /tmp is not visible inside
	// the wall: the agent goes to the working directory, beside the CA file.
	agent := filepath.Join(work, "agent.sh")
	if err := copyFile(filepath.Join(cfg.Root, "examples", "demo", "agent.sh"), agent); err != nil {
		return err
	}
	resolver := hosts.dns.Addr.String()
	fmt.Fprintf(w, "$ postern run --policy %s --resolver %s -- sh %s\n\n", show(pol), resolver, show(agent))
	runEnv := append(env,
		"DEMO_CA="+ca,
		"DEMO_PRIVATE="+hosts.private.Addr.String(),
		"DEMO_DNS="+hosts.dns.Addr.Addr().String(),
	)
	var stderr bytes.Buffer
	// The run works in its directory: the wall keeps the working directory
	// visible even where it lies under /tmp, which the run gets empty, and
	// that is where the CA file is.
	agentOut, runErr := commandIn(ctx, cfg, work, runEnv, &stderr, "run", "--policy", pol, "--resolver", resolver, "--", "sh", agent)
	indent(w, agentOut)
	if stderr.Len() > 0 {
		fmt.Fprintln(w, "\npostern told the agent on stderr, as each denial happened:")
		indent(w, stderr.String())
	}
	var problems []string
	if runErr != nil {
		problems = append(problems, fmt.Sprintf("postern run: %v", runErr))
	}
	table, reached, blocked, unexpected := judge(parseAgent(agentOut))
	problems = append(problems, unexpected...)

	// 5. What the door recorded.
	heading(w, "5. What the door recorded")
	id, err := lastRun(ctx, cfg, env)
	if err != nil {
		return err
	}
	fmt.Fprintf(w, "$ postern runs events %s\n", id)
	evs, err := command(ctx, cfg, env, nil, "runs", "events", id)
	indent(w, evs)
	if err != nil {
		problems = append(problems, fmt.Sprintf("runs events: %v", err))
	}
	// The wall's own refusal (the port outside the policy) is recorded too.
	if !regexp.MustCompile(`(?m)\bwall\s+deny\s+` + regexp.QuoteMeta(nameAllowed) + `\s+8080\b`).MatchString(evs) {
		problems = append(problems, "the wall's refusal of "+nameAllowed+":8080 is not among the run's events")
	}

	// 6. What the test DNS server saw.
	heading(w, "6. What the test DNS server was asked")
	asked := unique(hosts.dns.Queries())
	if len(asked) == 0 {
		fmt.Fprintln(w, "  (nothing)")
	}
	for _, q := range asked {
		fmt.Fprintf(w, "  %s\n", q)
	}
	var leaked []string
	for _, n := range []string{nameDenied, nameForbidden, nameExfil} {
		if hosts.dns.Asked(n) {
			leaked = append(leaked, n)
		}
	}
	if len(leaked) > 0 {
		problems = append(problems, fmt.Sprintf("refused names reached the DNS server: %s", strings.Join(leaked, ", ")))
	} else {
		fmt.Fprintf(w, "Only allowed names. Denied names never left the machine: %s, %s and %s were answered by the door inside the wall and never looked up.\n",
			nameDenied, nameForbidden, nameExfil)
	}
	if !hosts.dns.Asked(nameAllowed) {
		problems = append(problems, fmt.Sprintf("the door never looked up %s, yet the agent reached it", nameAllowed))
	}

	// 7. The policy the run itself suggests: exactly what it reached.
	heading(w, "7. A policy written from what the run reached")
	fmt.Fprintf(w, "$ postern policy from-run %s\n", id)
	gen, err := command(ctx, cfg, env, nil, "policy", "from-run", id)
	indent(w, gen)
	switch {
	case err != nil:
		problems = append(problems, fmt.Sprintf("policy from-run: %v", err))
	case !strings.Contains(gen, `mode = "enforce"`) || !strings.Contains(gen, `"`+nameAllowed+`"`) ||
		!strings.Contains(gen, "hard floor"):
		problems = append(problems, "policy from-run did not allow "+nameAllowed+" or did not list the floor's refusal")
	}
	fmt.Fprintln(w, "Under observe mode (examples/policies/observe.hcl) the same command writes the enforce policy for a new agent.")

	// Tear down before the verdict, so a failure leaves nothing behind either.
	heading(w, "Result")
	io.WriteString(w, table)
	fmt.Fprintln(w)
	if err := lab.Close(); err != nil {
		problems = append(problems, fmt.Sprintf("remove test hosts: %v", err))
	} else {
		fmt.Fprintln(w, "Test hosts removed.")
	}
	if len(problems) > 0 {
		for _, p := range problems {
			fmt.Fprintf(w, "UNEXPECTED: %s\n", p)
		}
		return fmt.Errorf("%w: %s", errUnexpected, strings.Join(problems, "; "))
	}
	fmt.Fprintf(w, "All %d attempts went as the policy says: %d reached their host, %d were stopped by the wall or the door.\n",
		len(attempts), reached, blocked)
	return nil
}

type demoHost struct {
	name, what string
	addr       netip.Addr
}

type demoHosts struct {
	allowed, forbidden, private, ns *testhosts.Host
	dns                             *testhosts.RecordingDNS
	list                            []demoHost
}

func startHosts(ctx context.Context, lab *testhosts.Lab) (*demoHosts, error) {
	var (
		d   demoHosts
		err error
	)
	mk := func(name string) *testhosts.Host {
		if err != nil {
			return nil
		}
		var h *testhosts.Host
		h, err = lab.Host(ctx, name)
		return h
	}
	d.allowed, d.forbidden, d.private, d.ns = mk("allowed"), mk("forbidden"), mk("private"), mk("dns")
	if err != nil {
		return nil, err
	}
	if _, err := d.allowed.ServeHTTP(80, nil); err != nil {
		return nil, err
	}
	if _, err := d.allowed.ServeHTTPS(443, nil, nameAllowed, nameAPI); err != nil {
		return nil, err
	}
	if _, err := d.forbidden.ServeHTTP(80, nil); err != nil {
		return nil, err
	}
	if _, err := d.private.ServeHTTP(80, nil); err != nil {
		return nil, err
	}
	answers := map[string][]netip.Addr{
		nameAllowed:   {d.allowed.Addr},
		nameAPI:       {d.allowed.Addr},
		nameDenied:    {d.allowed.Addr},
		nameForbidden: {d.forbidden.Addr},
		nameExfil:     {d.allowed.Addr},
	}
	if d.dns, err = d.ns.ServeDNS(53, answers); err != nil {
		return nil, err
	}
	d.list = []demoHost{
		{"allowed", "HTTP :80 and HTTPS :443 for " + nameAllowed + " and " + nameAPI, d.allowed.Addr},
		{"forbidden", "HTTP :80 for " + nameForbidden, d.forbidden.Addr},
		{"private", "HTTP :80 at a private address the policy does not list", d.private.Addr},
		{"dns", "DNS :53 answering every demo name, recording every question", d.ns.Addr},
	}
	return &d, nil
}

var cidrLine = regexp.MustCompile(`(?m)^allow_cidrs\s*=.*$`)

// rewriteCIDRs points the policy's allow_cidrs at prefix: the lab's subnet is
// chosen when it starts.
func rewriteCIDRs(src string, prefix netip.Prefix) (string, error) {
	if !cidrLine.MatchString(src) {
		return "", fmt.Errorf("examples/policies/demo.hcl has no allow_cidrs line to point at the test hosts; add one, e.g. allow_cidrs = [\"10.203.0.0/24\"]")
	}
	return cidrLine.ReplaceAllString(src, fmt.Sprintf("allow_cidrs = [%q]", prefix.Masked())), nil
}

// policyBody drops the policy's leading comment block, which describes the
// fixed addresses of the original rather than this run's.
func policyBody(src string) string {
	lines := strings.Split(src, "\n")
	i := 0
	for i < len(lines) && (strings.HasPrefix(lines[i], "#") || strings.TrimSpace(lines[i]) == "") {
		i++
	}
	return strings.Join(lines[i:], "\n")
}

// judge holds the agent's verdicts to the attempts table. It returns the
// table as text, the counts of attempts that reached their host and that were
// stopped as they should be, and what went otherwise.
func judge(got map[string]string) (table string, reached, blocked int, problems []string) {
	var b strings.Builder
	for _, a := range attempts {
		verdict, ok := got[a.ID]
		mark := "as expected"
		switch {
		case !ok:
			verdict, mark = "-", "UNEXPECTED"
			problems = append(problems, fmt.Sprintf("attempt %s printed no result line", a.ID))
		case verdict != a.Want:
			mark = "UNEXPECTED"
			problems = append(problems, fmt.Sprintf("attempt %s: %s, but the policy says %s", a.ID, verdict, a.Want))
		case verdict == "OK":
			reached++
		default:
			blocked++
		}
		fmt.Fprintf(&b, "  %-13s %-8s %-12s %s\n", a.ID, verdict, mark, a.Why)
	}
	return b.String(), reached, blocked, problems
}

var resultLine = regexp.MustCompile(`^(OK|BLOCKED)\s+(\S+)\s`)

// parseAgent reads the agent's result lines: attempt id -> OK or BLOCKED. An
// attempt printed twice keeps its first verdict unless a later one differs,
// in which case it is marked inconsistent.
func parseAgent(out string) map[string]string {
	got := map[string]string{}
	sc := bufio.NewScanner(strings.NewReader(out))
	for sc.Scan() {
		m := resultLine.FindStringSubmatch(sc.Text())
		if m == nil {
			continue
		}
		if prev, ok := got[m[2]]; ok && prev != m[1] {
			got[m[2]] = "INCONSISTENT"
			continue
		}
		got[m[2]] = m[1]
	}
	return got
}

// lastRun returns the id of the newest run in the demo's records.
func lastRun(ctx context.Context, cfg config, env []string) (string, error) {
	out, err := command(ctx, cfg, env, nil, "runs", "list", "--json")
	if err != nil {
		return "", fmt.Errorf("runs list: %w: %s", err, out)
	}
	var runs []struct {
		ID        string    `json:"id"`
		StartedAt time.Time `json:"started_at"`
	}
	if err := json.Unmarshal([]byte(out), &runs); err != nil {
		return "", fmt.Errorf("read runs list: %w", err)
	}
	if len(runs) == 0 {
		return "", errors.New("postern recorded no run")
	}
	newest := slices.MaxFunc(runs, func(a, b struct {
		ID        string    `json:"id"`
		StartedAt time.Time `json:"started_at"`
	}) int {
		return a.StartedAt.Compare(b.StartedAt)
	})
	return newest.ID, nil
}

// command runs postern with args and returns its stdout. stderr goes to
// errOut, or is folded into the output when errOut is nil.
func command(ctx context.Context, cfg config, env []string, errOut io.Writer, args ...string) (string, error) {
	return commandIn(ctx, cfg, cfg.Root, env, errOut, args...)
}

// commandIn is command with the working directory dir.
func commandIn(ctx context.Context, cfg config, dir string, env []string, errOut io.Writer, args ...string) (string, error) {
	cctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(cctx, cfg.Postern, args...)
	cmd.Env = env
	cmd.Dir = dir
	var out bytes.Buffer
	cmd.Stdout = &out
	cmd.Stderr = errOut
	if errOut == nil {
		cmd.Stderr = &out
	}
	cmd.WaitDelay = 5 * time.Second
	err := cmd.Run()
	return out.String(), err
}

func heading(w io.Writer, s string) {
	fmt.Fprintf(w, "\n== %s ==\n\n", s)
}

func indent(w io.Writer, s string) {
	s = strings.TrimRight(s, "\n")
	if s == "" {
		return
	}
	for _, l := range strings.Split(s, "\n") {
		fmt.Fprintf(w, "  %s\n", l)
	}
}

func unique(ss []string) []string {
	var out []string
	for _, s := range ss {
		if !slices.Contains(out, s) {
			out = append(out, s)
		}
	}
	return out
}

func relTo(root, p string) string {
	if r, err := filepath.Rel(root, p); err == nil && !strings.HasPrefix(r, "..") {
		return r
	}
	return p
}

func copyFile(src, dst string) error {
	b, err := os.ReadFile(src)
	if err != nil {
		return fmt.Errorf("read %s: %w", src, err)
	}
	if err := os.WriteFile(dst, b, 0o644); err != nil {
		return fmt.Errorf("write %s: %w", dst, err)
	}
	return nil
}
