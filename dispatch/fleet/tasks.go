package fleet

import (
	"encoding/json"
	"fmt"
	"maps"
	"math/big"
	"os"
	"path"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/hashicorp/hcl/v2"
	"github.com/hashicorp/hcl/v2/hclsyntax"
	"github.com/zclconf/go-cty/cty"

	"github.com/postern-dev/postern/internal/hcldecode"
	"github.com/postern-dev/postern/machine"
)

// File is a parsed tasks file: the dispatch's defaults and its tasks in file
// order. Every default is already applied to each Task.
type File struct {
	Filename string
	// Pool is the machines the dispatch may use, as the file names them; nil
	// is every machine of the inventory.
	Pool []MachineRef
	// PerMachine is how many runs one machine takes at once, unless the
	// machine sets its own (Slots).
	PerMachine int
	// Slots holds the machines' own per_machine, from machine "NAME" blocks.
	Slots map[string]int
	// Max bounds the runs of the whole dispatch at once; 0 is no bound but
	// the slots. The command line's --max replaces it.
	Max   int
	Tasks []Task
}

// MachineRef is a machine named in the file, with where it was named, so that
// a name the inventory does not know can be shown where it was written.
type MachineRef struct {
	Name string `json:"name"`
	Pos  string `json:"pos"`
}

// Network says how a task's run may reach the network.
type Network string

const (
	// NetworkWall is the default: the run behind the wall, its connections
	// judged by its policy at the door.
	NetworkWall Network = "wall"
	// NetworkNone is a run with no network at all (postern run --network
	// none): a network namespace with only lo, no door, no DNS, whatever the
	// file's default policy. It needs a Linux network wall.
	NetworkNone Network = "none"
	// NetworkOpen runs without a wall, deliberately; the task's reason is
	// recorded, as --egress-open's is.
	NetworkOpen Network = "open"
)

// Task is one entry of a tasks file, with the file's defaults applied.
type Task struct {
	Name    string   `json:"name"`
	Pos     string   `json:"pos"` // file:line:col of its block
	Command []string `json:"command"`
	// Machines is the task's own pool; nil is the file's pool.
	Machines []MachineRef `json:"machines,omitempty"`
	// Needs are labels a machine must have: "gpu" (any value but "no" or
	// "false"; a record that measured gpu yes counts too) or "key=value".
	Needs []string `json:"needs,omitempty"`
	// Policy is the policy file's path, relative ones taken from the tasks
	// file's directory; "" allows nothing.
	Policy    string  `json:"policy,omitempty"`
	PolicyPos string  `json:"policy_pos,omitempty"`
	Network   Network `json:"network"`
	Reason    string  `json:"reason,omitempty"` // why the network is open
	// Env's values are the run's, never recorded: a record of the task
	// holds their names alone (see MarshalJSON).
	Env map[string]string `json:"-"`
	// Dir is the directory the command starts in, relative to where the
	// dispatch was started (inside its workspace); "" is that directory.
	Dir string `json:"dir,omitempty"`
	// Timeout stops a run that takes longer; 0 is no limit.
	Timeout time.Duration `json:"timeout_ns,omitempty"`
	// Container is the image of a local container the task runs in (lane
	// local-container, as postern run --container); "" is none.
	Container string `json:"container,omitempty"`
	// Retries is how many times the task is placed again when its machine
	// is lost.
	Retries int `json:"retries"`
}

// Defaults of a tasks file that does not set them.
const (
	// DefaultPerMachine is one run at a time on a machine: an agent run is
	// heavy, and a person raises it knowing the machine.
	DefaultPerMachine = 1
	// DefaultRetries places a task once more when its machine drops: a lost
	// machine is not the task's fault, and an attempt's work stays in its own
	// workspace, so the second attempt starts clean.
	DefaultRetries = 1
)

// Limits on the numbers a tasks file may hold.
const (
	maxPerMachine = 1024
	maxRetries    = 100
	maxMax        = 100000
)

// ParseError is a tasks file that cannot be used. Diags holds every problem
// found, each with the file, line and column it is about.
type ParseError struct {
	Filename string
	Diags    hcl.Diagnostics
}

// Error lists one problem per line: "file:line:col: summary; detail".
func (e *ParseError) Error() string { return hcldecode.Lines(e.Filename, e.Diags) }

// posString is where r starts, as "file:line:col".
var posString = hcldecode.Pos

// Load reads the tasks file at path and parses it.
func Load(path string) (*File, error) {
	src, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("read tasks file %q: %w", path, err)
	}
	return Parse(path, src)
}

var (
	fileAttrs    = []string{"policy", "machines", "per_machine", "retries", "max", "timeout", "env"}
	taskAttrs    = []string{"command", "machines", "needs", "policy", "network", "reason", "env", "dir", "timeout", "retries", "container"}
	machineAttrs = []string{"per_machine"}
	fileBlocks   = []string{"task", "machine"}
)

// aliases are words people reach for from other tools, and the word meant.
var aliases = map[string]string{
	"cmd": "command", "args": "command", "argv": "command", "run": "command", "exec": "command",
	"cwd": "dir", "workdir": "dir", "working_dir": "dir", "directory": "dir",
	"environment": "env", "vars": "env",
	"labels": "needs", "requires": "needs", "constraints": "needs", "tags": "needs",
	"hosts": "machines", "pool": "machines", "machine": "machines",
	"slots": "per_machine", "parallel": "per_machine", "jobs": "per_machine", "concurrency": "max",
	"retry": "retries", "attempts": "retries",
	"time_limit": "timeout", "deadline": "timeout",
	"egress_open": "reason",
}

// Parse reads a tasks file. filename is used for positions and as the base of
// relative policy paths. Every problem found is reported at once, in a
// *ParseError.
//
//	policy      = "policies/agent.hcl"    # default for every task; a task may name its own
//	machines    = ["gpu1", "gpu2", "box"] # the pool; default: every machine in the inventory
//	per_machine = 2                       # runs at once on one machine (default 1)
//	retries     = 1                       # times a task is placed again when its machine is lost (default 1)
//	max         = 8                       # runs at once in the whole dispatch (default: the slots)
//	timeout     = "2h"                    # default for every task; none by default
//	env         = { CI = "1" }            # default for every task; a task's own env adds to it
//
//	machine "gpu1" { per_machine = 1 }    # a machine's own slots
//
//	task "fix-auth" {
//	  command  = ["my-agent", "fix the failing auth test"]
//	  machines = ["gpu1", "box"]          # within the pool
//	  needs    = ["gpu", "team=research"] # labels the machine must have
//	  policy   = "policies/strict.hcl"
//	  network  = "wall"                   # or "none" (nothing allowed), or "open" with reason = "..."
//	  env      = { GOFLAGS = "-mod=mod" }
//	  dir      = "services/auth"          # where the command starts, inside the workspace
//	  timeout  = "30m"
//	  retries  = 0
//	  container = "python:3.12"           # in a local container from this image
//	}
func Parse(filename string, src []byte) (*File, error) {
	file, diags := hclsyntax.ParseConfig(src, filename, hcl.InitialPos)
	if diags.HasErrors() {
		for _, d := range diags {
			if d.Summary == "Invalid single-argument block definition" {
				// HCL's own words name its grammar; say what to write.
				d.Summary = "a block on one line holds one attribute"
				d.Detail = "put each attribute on a line of its own: task \"name\" {, then command = [...] and machines = [...] on the lines below, then }"
			}
		}
		return nil, &ParseError{Filename: filename, Diags: diags}
	}
	body, ok := file.Body.(*hclsyntax.Body)
	if !ok {
		return nil, &ParseError{Filename: filename, Diags: hcl.Diagnostics{{
			Severity: hcl.DiagError, Summary: "not a native HCL tasks file",
		}}}
	}
	p := parser{src: src, base: filepath.Dir(filename)}
	f := p.file(filename, body)
	if p.diags.HasErrors() {
		slices.SortStableFunc(p.diags, func(a, b *hcl.Diagnostic) int {
			if a.Subject == nil || b.Subject == nil {
				return 0
			}
			return a.Subject.Start.Byte - b.Subject.Start.Byte
		})
		return nil, &ParseError{Filename: filename, Diags: p.diags}
	}
	return f, nil
}

type parser struct {
	src   []byte
	base  string
	diags hcl.Diagnostics
}

func (p *parser) errorf(r hcl.Range, summary, detailFormat string, args ...any) {
	rr := r
	p.diags = append(p.diags, &hcl.Diagnostic{
		Severity: hcl.DiagError,
		Summary:  summary,
		Detail:   fmt.Sprintf(detailFormat, args...),
		Subject:  &rr,
	})
}

// defaults are the file's settings that every task inherits.
type defaults struct {
	policy, policyPos string
	retries           int
	timeout           time.Duration
	env               map[string]string
}

func (p *parser) file(filename string, body *hclsyntax.Body) *File {
	f := &File{Filename: filename, PerMachine: DefaultPerMachine}
	d := defaults{retries: DefaultRetries}
	var poolRange hcl.Range
	for _, a := range sortedAttrs(body) {
		switch a.Name {
		case "policy":
			d.policy, d.policyPos = p.policy(a)
		case "machines":
			f.Pool = p.machines(a)
			if f.Pool == nil {
				f.Pool = []MachineRef{}
			}
			poolRange = a.SrcRange
			if len(f.Pool) == 0 && !p.diags.HasErrors() {
				p.errorf(a.Expr.Range(), "machines is empty", `no task could be placed; name the pool, as in machines = ["gpu1", "box"], or leave machines out for every machine of the inventory`)
			}
		case "per_machine":
			f.PerMachine = p.intIn(a, 1, maxPerMachine, "2")
		case "retries":
			d.retries = p.intIn(a, 0, maxRetries, "1")
		case "max":
			f.Max = p.intIn(a, 1, maxMax, "8")
		case "timeout":
			d.timeout = p.duration(a)
		case "env":
			d.env = p.env(a)
		default:
			if slices.Contains(taskAttrs, a.Name) {
				p.errorf(a.NameRange, fmt.Sprintf("%s belongs in a task", a.Name),
					`write it inside a task block: task "name" { %s = ... }; the file's own settings are %s`, a.Name, strings.Join(fileAttrs, ", "))
				continue
			}
			p.unknown(a, "a tasks file", fileAttrs)
		}
	}
	inPool := map[string]bool{}
	for _, m := range f.Pool {
		inPool[m.Name] = true
	}
	seen := map[string]string{}
	for _, blk := range body.Blocks {
		switch blk.Type {
		case "task":
			t, ok := p.task(blk, d)
			if !ok {
				continue
			}
			if prev, dup := seen[t.Name]; dup {
				p.errorf(blk.LabelRanges[0], fmt.Sprintf("task %q declared twice", t.Name),
					"it is first declared at %s; give each task a name of its own", prev)
				continue
			}
			seen[t.Name] = t.Pos
			if f.Pool != nil {
				for _, m := range t.Machines {
					if !inPool[m.Name] {
						p.errorf(p.rangeOf(blk, "machines"), fmt.Sprintf("machine %q of task %q is not in the pool", m.Name, t.Name),
							"the pool is machines = %s at %s; add %q to it, or take it out of the task", refList(f.Pool), posString(poolRange), m.Name)
					}
				}
			}
			f.Tasks = append(f.Tasks, t)
		case "machine":
			name, n, ok := p.machineBlock(blk)
			if !ok {
				continue
			}
			if f.Pool != nil && !inPool[name] {
				p.errorf(blk.LabelRanges[0], fmt.Sprintf("machine %q is not in the pool", name),
					"the pool is machines = %s at %s; add %q to it, or remove this block", refList(f.Pool), posString(poolRange), name)
				continue
			}
			if _, dup := f.Slots[name]; dup {
				p.errorf(blk.LabelRanges[0], fmt.Sprintf("machine %q declared twice", name), "keep one block for it")
				continue
			}
			if f.Slots == nil {
				f.Slots = map[string]int{}
			}
			f.Slots[name] = n
		default:
			detail := `a tasks file has task "name" { ... } and machine "name" { per_machine = N } blocks`
			if near := nearest(blk.Type, fileBlocks); near != "" {
				detail = "did you mean " + near + "? " + detail
			}
			p.errorf(blk.TypeRange, fmt.Sprintf("unexpected block %q", blk.Type), "%s", detail)
		}
	}
	if len(f.Tasks) == 0 && !p.diags.HasErrors() {
		p.errorf(body.SrcRange, "no tasks", `write at least one task: task "fix-auth" { command = ["my-agent", "fix the failing auth test"] }`)
	}
	return f
}

// The patterns are compiled at first use, not at every start of the binary
// (the counted repetitions make big programs).
var taskNameRE = sync.OnceValue(func() *regexp.Regexp { return regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._-]{0,62}$`) })

func (p *parser) task(blk *hclsyntax.Block, d defaults) (Task, bool) {
	if len(blk.Labels) != 1 {
		r := blk.TypeRange
		if len(blk.Labels) > 1 {
			r = blk.LabelRanges[1]
		}
		p.errorf(r, "a task has one name", `write task "fix-auth" { command = [...] }`)
		return Task{}, false
	}
	t := Task{
		Name: blk.Labels[0], Pos: posString(blk.TypeRange),
		Policy: d.policy, PolicyPos: d.policyPos, Network: NetworkWall,
		Retries: d.retries, Timeout: d.timeout,
	}
	ok := true
	if !taskNameRE().MatchString(t.Name) {
		p.errorf(blk.LabelRanges[0], fmt.Sprintf("bad task name %q", t.Name),
			"a task name has letters, digits, '.', '_' and '-', starts with a letter or digit, and has at most 63 characters, as in task \"fix-auth\"")
		ok = false
	}
	for _, inner := range blk.Body.Blocks {
		p.errorf(inner.TypeRange, fmt.Sprintf("unexpected block %q in task %q", inner.Type, t.Name),
			"a task has only the attributes %s; write for example env = { KEY = \"value\" }", strings.Join(taskAttrs, ", "))
		ok = false
	}
	var network, reason, ownPolicy *hclsyntax.Attribute
	var env map[string]string
	for _, a := range sortedAttrs(blk.Body) {
		switch a.Name {
		case "command":
			t.Command = p.command(a)
		case "machines":
			t.Machines = p.machines(a)
			if len(t.Machines) == 0 && !p.diags.HasErrors() {
				p.errorf(a.Expr.Range(), "machines is empty", `the task could go nowhere; name machines, as in machines = ["box"], or leave machines out for the file's pool`)
			}
		case "needs":
			t.Needs = p.needs(a)
		case "policy":
			ownPolicy = a
			t.Policy, t.PolicyPos = p.policy(a)
		case "network":
			network = a
		case "reason":
			reason = a
		case "env":
			env = p.env(a)
		case "dir":
			t.Dir = p.dir(a)
		case "timeout":
			t.Timeout = p.duration(a)
		case "retries":
			t.Retries = p.intIn(a, 0, maxRetries, "1")
		case "container":
			if v, vok := p.str(a); vok {
				t.Container = strings.TrimSpace(v)
				if t.Container == "" || strings.ContainsAny(t.Container, " \t\n\x00") || strings.HasPrefix(t.Container, "-") {
					p.errorf(a.Expr.Range(), fmt.Sprintf("bad container image %q", v), `write the image to run the task in, as in container = "docker.io/library/python:3.12"`)
				}
			}
		default:
			if slices.Contains(fileAttrs, a.Name) || a.Name == "per_machine" {
				p.errorf(a.NameRange, fmt.Sprintf("%s belongs to the file or a machine, not a task", a.Name),
					`set per_machine and max at the top of the file, or a machine's own in machine "name" { per_machine = N }`)
				continue
			}
			p.unknown(a, "a task", taskAttrs)
		}
	}
	if _, has := blk.Body.Attributes["command"]; !has {
		p.errorf(blk.TypeRange, fmt.Sprintf("task %q has no command", t.Name),
			`write the program and its arguments: command = ["my-agent", "fix the failing auth test"]`)
		ok = false
	}
	if network != nil {
		if s, sok := p.str(network); sok {
			switch Network(s) {
			case NetworkWall, NetworkNone, NetworkOpen:
				t.Network = Network(s)
			default:
				p.errorf(network.Expr.Range(), fmt.Sprintf("unknown network %q", s),
					`write network = "wall" (behind the wall, judged by the policy; the default), network = "none" (behind the wall, nothing allowed) or network = "open" with reason = "why" (no wall)`)
			}
		}
	}
	if reason != nil {
		if s, sok := p.str(reason); sok {
			t.Reason = strings.TrimSpace(s)
			if t.Network != NetworkOpen {
				p.errorf(reason.NameRange, "reason without an open network",
					`a reason is recorded for a run without a wall; write network = "open" beside it, or remove the reason`)
			}
		}
	}
	switch t.Network {
	case NetworkOpen:
		if reason == nil || t.Reason == "" {
			p.errorf(network.Expr.Range(), fmt.Sprintf("task %q opens the network without a reason", t.Name),
				`a run without a wall is recorded with why; write reason = "the vendor's installer needs any host" beside network = "open"`)
		}
	case NetworkNone:
		if ownPolicy != nil {
			p.errorf(ownPolicy.NameRange, fmt.Sprintf("task %q has a policy and network = \"none\"", t.Name),
				`"none" allows nothing whatever the policy says; remove one of them`)
		}
		t.Policy, t.PolicyPos = "", ""
	}
	t.Env = mergeEnv(d.env, env)
	return t, ok
}

func mergeEnv(file, task map[string]string) map[string]string {
	if len(file)+len(task) == 0 {
		return nil
	}
	out := make(map[string]string, len(file)+len(task))
	for k, v := range file {
		out[k] = v
	}
	for k, v := range task {
		out[k] = v
	}
	return out
}

func (p *parser) machineBlock(blk *hclsyntax.Block) (string, int, bool) {
	if len(blk.Labels) != 1 {
		r := blk.TypeRange
		if len(blk.Labels) > 1 {
			r = blk.LabelRanges[1]
		}
		p.errorf(r, "a machine block has one name", `write machine "gpu1" { per_machine = 1 }`)
		return "", 0, false
	}
	name := blk.Labels[0]
	ok := true
	if err := machine.CheckName(name); err != nil {
		p.errorf(blk.LabelRanges[0], fmt.Sprintf("bad machine name %q", name), "%v", err)
		ok = false
	}
	for _, inner := range blk.Body.Blocks {
		p.errorf(inner.TypeRange, fmt.Sprintf("unexpected block %q in machine %q", inner.Type, name), "a machine block has only per_machine = N")
		ok = false
	}
	n := 0
	for _, a := range sortedAttrs(blk.Body) {
		if a.Name != "per_machine" {
			detail := "a machine block in a tasks file sets only per_machine; how to reach the machine and its labels are the inventory's ('postern machine add', 'postern machine label')"
			if near := nearest(a.Name, machineAttrs); near != "" {
				detail = "did you mean per_machine? " + detail
			}
			p.errorf(a.NameRange, fmt.Sprintf("unknown attribute %q in machine %q", a.Name, name), "%s", detail)
			ok = false
			continue
		}
		n = p.intIn(a, 1, maxPerMachine, "1")
	}
	if _, has := blk.Body.Attributes["per_machine"]; !has && ok {
		p.errorf(blk.TypeRange, fmt.Sprintf("machine %q sets nothing", name), "write machine %q { per_machine = 1 }, or remove the block", name)
		ok = false
	}
	return name, n, ok && n > 0
}

// rangeOf is the range of a block's attribute, or of the block's type.
func (p *parser) rangeOf(blk *hclsyntax.Block, attr string) hcl.Range {
	if a, ok := blk.Body.Attributes[attr]; ok {
		return a.Expr.Range()
	}
	return blk.TypeRange
}

func sortedAttrs(body *hclsyntax.Body) []*hclsyntax.Attribute {
	attrs := make([]*hclsyntax.Attribute, 0, len(body.Attributes))
	for _, a := range body.Attributes {
		attrs = append(attrs, a)
	}
	slices.SortFunc(attrs, func(a, b *hclsyntax.Attribute) int { return a.SrcRange.Start.Byte - b.SrcRange.Start.Byte })
	return attrs
}

func refList(refs []MachineRef) string {
	names := make([]string, len(refs))
	for i, r := range refs {
		names[i] = strconv.Quote(r.Name)
	}
	return "[" + strings.Join(names, ", ") + "]"
}

func (p *parser) unknown(a *hclsyntax.Attribute, what string, known []string) {
	detail := what + " has only " + strings.Join(known, ", ")
	if near := nearest(a.Name, known); near != "" {
		detail = "did you mean " + near + "? " + detail
	}
	p.errorf(a.NameRange, fmt.Sprintf("unknown attribute %q", a.Name), "%s", detail)
}

// nearest returns the known word a misspelt or borrowed one most likely
// meant, or "".
func nearest(w string, known []string) string {
	lw := strings.ToLower(w)
	if a, ok := aliases[lw]; ok && slices.Contains(known, a) {
		return a
	}
	best, bestD := "", max(2, len(w)/3)+1
	for _, k := range known {
		if d := editDistance(lw, k); d < bestD {
			best, bestD = k, d
		}
	}
	return best
}

func editDistance(a, b string) int {
	prev := make([]int, len(b)+1)
	cur := make([]int, len(b)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(a); i++ {
		cur[0] = i
		for j := 1; j <= len(b); j++ {
			cost := 1
			if a[i-1] == b[j-1] {
				cost = 0
			}
			cur[j] = min(prev[j]+1, cur[j-1]+1, prev[j-1]+cost)
		}
		prev, cur = cur, prev
	}
	return prev[len(b)]
}

// value evaluates an expression without variables or functions, turning a
// bare word into an error that says to quote it.
func (p *parser) value(e hclsyntax.Expression) (cty.Value, bool) {
	v, d := e.Value(nil)
	if d.HasErrors() {
		if _, ok := e.(*hclsyntax.ScopeTraversalExpr); ok {
			r := e.Range()
			text := string(r.SliceBytes(p.src))
			p.errorf(r, fmt.Sprintf("bare word %s", text), "write it in quotes: %q", text)
			return cty.NilVal, false
		}
		if _, ok := e.(*hclsyntax.FunctionCallExpr); ok {
			p.errorf(e.Range(), "functions are not available in a tasks file", "write the value itself")
			return cty.NilVal, false
		}
		switch e.(type) {
		case *hclsyntax.TemplateExpr, *hclsyntax.TemplateWrapExpr:
			p.errorf(e.Range(), "interpolation is not available in a tasks file",
				"write the value itself; to leave ${...} for a shell, write $${...}")
			return cty.NilVal, false
		}
		p.diags = append(p.diags, d...)
		return cty.NilVal, false
	}
	if v.IsNull() {
		p.errorf(e.Range(), "null value", "write a value, or leave the attribute out for its default")
		return cty.NilVal, false
	}
	if !v.IsWhollyKnown() {
		p.errorf(e.Range(), "value not known", "write the value itself")
		return cty.NilVal, false
	}
	return v, true
}

func (p *parser) str(a *hclsyntax.Attribute) (string, bool) {
	v, ok := p.value(a.Expr)
	if !ok {
		return "", false
	}
	if v.Type() != cty.String {
		p.errorf(a.Expr.Range(), fmt.Sprintf("%s must be a string", a.Name), "write %s = \"...\"", a.Name)
		return "", false
	}
	return v.AsString(), true
}

func (p *parser) intIn(a *hclsyntax.Attribute, lo, hi int, example string) int {
	v, ok := p.value(a.Expr)
	if !ok {
		return 0
	}
	fix := fmt.Sprintf("write a whole number from %d to %d without quotes, as in %s = %s", lo, hi, a.Name, example)
	if v.Type() == cty.String {
		if n, err := strconv.Atoi(strings.TrimSpace(v.AsString())); err == nil && n >= lo && n <= hi {
			fix = fmt.Sprintf("write it without quotes: %s = %d", a.Name, n)
		}
		p.errorf(a.Expr.Range(), fmt.Sprintf("%s must be a number", a.Name), "%s", fix)
		return 0
	}
	if v.Type() != cty.Number {
		p.errorf(a.Expr.Range(), fmt.Sprintf("%s must be a number", a.Name), "%s", fix)
		return 0
	}
	bf := v.AsBigFloat()
	if !bf.IsInt() || bf.Cmp(big.NewFloat(float64(lo))) < 0 || bf.Cmp(big.NewFloat(float64(hi))) > 0 {
		p.errorf(a.Expr.Range(), fmt.Sprintf("%s out of range", a.Name), "%s", fix)
		return 0
	}
	n, _ := bf.Int64()
	return int(n)
}

func (p *parser) duration(a *hclsyntax.Attribute) time.Duration {
	v, ok := p.value(a.Expr)
	if !ok {
		return 0
	}
	if v.Type() == cty.Number {
		fix := `write a duration in quotes, as in timeout = "30m"`
		if bf := v.AsBigFloat(); bf.IsInt() && bf.Sign() > 0 {
			n, _ := bf.Int64()
			fix = fmt.Sprintf(`write the unit too, in quotes: timeout = "%ds" (or "%dm")`, n, n)
		}
		p.errorf(a.Expr.Range(), "timeout must be a duration", "%s", fix)
		return 0
	}
	if v.Type() != cty.String {
		p.errorf(a.Expr.Range(), "timeout must be a duration", `write a duration in quotes, as in timeout = "30m"`)
		return 0
	}
	s := v.AsString()
	dur, err := time.ParseDuration(strings.TrimSpace(s))
	if err != nil || dur <= 0 {
		p.errorf(a.Expr.Range(), fmt.Sprintf("bad timeout %q", s), `write a positive duration with its unit: "90s", "30m", "2h", "1h30m"; leave timeout out for no limit`)
		return 0
	}
	return dur
}

// elems returns the expressions of a list attribute, or reports that it must
// be a list, showing the fix.
func (p *parser) elems(a *hclsyntax.Attribute, example string) ([]hclsyntax.Expression, bool) {
	if t, ok := a.Expr.(*hclsyntax.TupleConsExpr); ok {
		return t.Exprs, true
	}
	fix := a.Name + " = [" + example + "]"
	if v, d := a.Expr.Value(nil); !d.HasErrors() && !v.IsNull() && v.Type() == cty.String {
		fix = a.Name + " = [" + strconv.Quote(v.AsString()) + "]"
	}
	p.errorf(a.Expr.Range(), fmt.Sprintf("%s must be a list", a.Name), "write %s", fix)
	return nil, false
}

// strElems evaluates a list of strings, reporting each element that is not one.
func (p *parser) strElems(a *hclsyntax.Attribute, example string) (vals []string, ranges []hcl.Range, ok bool) {
	es, ok := p.elems(a, example)
	if !ok {
		return nil, nil, false
	}
	ok = true
	for _, e := range es {
		v, vok := p.value(e)
		if !vok {
			ok = false
			continue
		}
		if v.Type() != cty.String {
			p.errorf(e.Range(), fmt.Sprintf("%s entries must be strings", a.Name), "write each in quotes, as in %s = [%s]", a.Name, example)
			ok = false
			continue
		}
		vals = append(vals, v.AsString())
		ranges = append(ranges, e.Range())
	}
	return vals, ranges, ok
}

// shellChars are the characters that make a command string need a shell.
const shellChars = "|&;<>()$`\\\"'*?[]#~=%{}\n"

func (p *parser) command(a *hclsyntax.Attribute) []string {
	if v, d := a.Expr.Value(nil); !d.HasErrors() && !v.IsNull() && v.Type() == cty.String {
		s := v.AsString()
		fix := ""
		if strings.ContainsAny(s, shellChars) || strings.TrimSpace(s) == "" {
			fix = fmt.Sprintf(`command = ["sh", "-c", %s]`, strconv.Quote(s))
		} else {
			words := strings.Fields(s)
			for i, w := range words {
				words[i] = strconv.Quote(w)
			}
			fix = "command = [" + strings.Join(words, ", ") + "]"
		}
		p.errorf(a.Expr.Range(), "command must be a list", "a command is the program and its arguments, run without a shell; write %s", fix)
		return nil
	}
	args, ranges, ok := p.strElems(a, `"my-agent", "fix the failing auth test"`)
	if !ok {
		return nil
	}
	if len(args) == 0 {
		p.errorf(a.Expr.Range(), "command is empty", `write the program and its arguments, as in command = ["my-agent", "fix the failing auth test"]`)
		return nil
	}
	if strings.TrimSpace(args[0]) == "" {
		p.errorf(ranges[0], "the program's name is empty", `the first entry is the program to run, as in command = ["make", "test"]`)
		return nil
	}
	for i, s := range args {
		if strings.IndexByte(s, 0) >= 0 {
			p.errorf(ranges[i], "a NUL byte in the command", "an argument cannot hold a NUL byte; remove it")
			return nil
		}
	}
	return args
}

func (p *parser) machines(a *hclsyntax.Attribute) []MachineRef {
	names, ranges, ok := p.strElems(a, `"gpu1", "box"`)
	if !ok {
		return nil
	}
	var out []MachineRef
	seen := map[string]bool{}
	for i, n := range names {
		if err := machine.CheckName(n); err != nil {
			p.errorf(ranges[i], fmt.Sprintf("bad machine name %q", n), "%v", err)
			continue
		}
		if seen[n] {
			p.errorf(ranges[i], fmt.Sprintf("machine %q listed twice", n), "list it once; to give it more runs at once write machine %q { per_machine = N }", n)
			continue
		}
		seen[n] = true
		out = append(out, MachineRef{Name: n, Pos: posString(ranges[i])})
	}
	return out
}

var (
	labelKeyRE   = sync.OnceValue(func() *regexp.Regexp { return regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._/-]{0,62}$`) })
	labelValueRE = sync.OnceValue(func() *regexp.Regexp { return regexp.MustCompile(`^[A-Za-z0-9._/:+-]{1,63}$`) })
)

func (p *parser) needs(a *hclsyntax.Attribute) []string {
	vals, ranges, _ := p.strElems(a, `"gpu"`)
	var out []string
	for i, s := range vals {
		key, value, hasValue := strings.Cut(s, "=")
		if !labelKeyRE().MatchString(key) || (hasValue && !labelValueRE().MatchString(value)) {
			p.errorf(ranges[i], fmt.Sprintf("bad need %q", s),
				`a need is a label's name, as in "gpu" (the machine has the label), or name=value, as in "team=research"; names have letters, digits, '.', '_', '/' and '-'`)
			continue
		}
		if slices.Contains(out, s) {
			continue
		}
		out = append(out, s)
	}
	return out
}

var envKeyRE = sync.OnceValue(func() *regexp.Regexp { return regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*$`) })

func (p *parser) env(a *hclsyntax.Attribute) map[string]string {
	obj, isObj := a.Expr.(*hclsyntax.ObjectConsExpr)
	if !isObj {
		p.errorf(a.Expr.Range(), "env must be a map", `write env = { NAME = "value" }`)
		return nil
	}
	out := map[string]string{}
	for _, item := range obj.Items {
		kv, ok := p.value(item.KeyExpr)
		if !ok {
			continue
		}
		if kv.Type() != cty.String || !envKeyRE().MatchString(kv.AsString()) {
			p.errorf(item.KeyExpr.Range(), "bad environment variable name",
				`a name has letters, digits and '_' and does not start with a digit, as in env = { GOFLAGS = "-mod=mod" }`)
			continue
		}
		k := kv.AsString()
		vv, ok := p.value(item.ValueExpr)
		if !ok {
			continue
		}
		switch vv.Type() {
		case cty.String:
		case cty.Number, cty.Bool:
			p.errorf(item.ValueExpr.Range(), fmt.Sprintf("env %s must be a string", k),
				"an environment holds strings; write it in quotes: %s = %q", k, string(item.ValueExpr.Range().SliceBytes(p.src)))
			continue
		default:
			p.errorf(item.ValueExpr.Range(), fmt.Sprintf("env %s must be a string", k), `write %s = "value"`, k)
			continue
		}
		s := vv.AsString()
		if strings.IndexByte(s, 0) >= 0 {
			p.errorf(item.ValueExpr.Range(), fmt.Sprintf("a NUL byte in env %s", k), "an environment value cannot hold a NUL byte; remove it")
			continue
		}
		if _, dup := out[k]; dup {
			p.errorf(item.KeyExpr.Range(), fmt.Sprintf("env %s set twice", k), "keep one")
			continue
		}
		out[k] = s
	}
	return out
}

func (p *parser) dir(a *hclsyntax.Attribute) string {
	s, ok := p.str(a)
	if !ok {
		return ""
	}
	bad := func(detail string) string {
		p.errorf(a.Expr.Range(), fmt.Sprintf("bad dir %q", s), "%s", detail)
		return ""
	}
	switch {
	case strings.TrimSpace(s) == "":
		return bad("write a directory relative to where the dispatch is started, as in dir = \"services/auth\", or leave dir out for that directory")
	case strings.IndexByte(s, 0) >= 0:
		return bad("a path cannot hold a NUL byte")
	case strings.HasPrefix(s, "/") || strings.HasPrefix(s, "~"):
		return bad("the task runs in its own copy of the work, on its machine, where this path means nothing; write a directory relative to where the dispatch is started, as in dir = \"services/auth\"")
	}
	clean := path.Clean(s)
	if clean == ".." || strings.HasPrefix(clean, "../") {
		return bad("a task's directory lies inside the work it is given; write one below where the dispatch is started, as in dir = \"services/auth\"")
	}
	if clean == "." {
		return ""
	}
	return clean
}

func (p *parser) policy(a *hclsyntax.Attribute) (string, string) {
	s, ok := p.str(a)
	if !ok {
		return "", ""
	}
	if strings.TrimSpace(s) == "" || strings.IndexByte(s, 0) >= 0 {
		p.errorf(a.Expr.Range(), "bad policy path", `write the policy file's path, as in policy = "policies/agent.hcl" (relative to this file), or leave policy out to allow nothing`)
		return "", ""
	}
	if strings.HasPrefix(s, "~") {
		p.errorf(a.Expr.Range(), fmt.Sprintf("bad policy path %q", s), "no shell expands ~ here; write the path relative to this file, or absolute")
		return "", ""
	}
	if !filepath.IsAbs(s) {
		s = filepath.Join(p.base, s)
	}
	return s, posString(a.Expr.Range())
}

// MarshalJSON writes t as its records keep it: the names of its
// environment variables in env_names, never their values, which may be
// secrets (as a run's record keeps names only).
func (t Task) MarshalJSON() ([]byte, error) {
	type plain Task
	names := slices.Sorted(maps.Keys(t.Env))
	if names == nil {
		names = []string{}
	}
	return json.Marshal(struct {
		plain
		EnvNames []string `json:"env_names"`
	}{plain(t), names})
}
