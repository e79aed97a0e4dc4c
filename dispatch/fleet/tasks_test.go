package fleet

import (
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/postern-dev/postern/door/policy"
)

// The issue's example, with each block's attributes on lines of their own:
// HCL holds one attribute in a block written on one line.
func TestParseIssueExample(t *testing.T) {
	src := `policy      = "policies/agent.hcl"    # default for every task; a task may name its own
machines    = ["gpu1", "gpu2", "box"] # the pool; default: every machine in the inventory
per_machine = 2                       # runs at once on one machine (a machine may set its own)
retries     = 1                       # times a task is placed again when its machine is lost

task "fix-auth"  { command = ["my-agent", "fix the failing auth test"] }
task "docs" {
  command  = ["my-agent", "update the docs"]
  machines = ["box"]
}
task "train" {
  command = ["python", "train.py"]
  needs   = ["gpu"]
}
`
	f, err := Parse("work/tasks.hcl", []byte(src))
	if err != nil {
		t.Fatal(err)
	}
	wantPool := []MachineRef{{"gpu1", "work/tasks.hcl:2:16"}, {"gpu2", "work/tasks.hcl:2:24"}, {"box", "work/tasks.hcl:2:32"}}
	if !reflect.DeepEqual(f.Pool, wantPool) || f.PerMachine != 2 || f.Max != 0 || f.Slots != nil {
		t.Errorf("file = %+v", f)
	}
	pol := filepath.Join("work", "policies", "agent.hcl")
	want := []Task{
		{Name: "fix-auth", Pos: "work/tasks.hcl:6:1", Command: []string{"my-agent", "fix the failing auth test"},
			Policy: pol, PolicyPos: "work/tasks.hcl:1:15", Network: NetworkWall, Retries: 1},
		{Name: "docs", Pos: "work/tasks.hcl:7:1", Command: []string{"my-agent", "update the docs"},
			Machines: []MachineRef{{"box", "work/tasks.hcl:9:15"}}, Policy: pol, PolicyPos: "work/tasks.hcl:1:15", Network: NetworkWall, Retries: 1},
		{Name: "train", Pos: "work/tasks.hcl:11:1", Command: []string{"python", "train.py"}, Needs: []string{"gpu"},
			Policy: pol, PolicyPos: "work/tasks.hcl:1:15", Network: NetworkWall, Retries: 1},
	}
	if !reflect.DeepEqual(f.Tasks, want) {
		t.Errorf("tasks =\n%+v\nwant\n%+v", f.Tasks, want)
	}

	// As the issue wrote it, two attributes on one line say what to write.
	_, err = Parse("t.hcl", []byte(`task "docs" { command = ["my-agent", "update the docs"]  machines = ["box"] }`))
	want1 := `t.hcl:1:58: a block on one line holds one attribute; put each attribute on a line of its own: task "name" {, then command = [...] and machines = [...] on the lines below, then }`
	if err == nil || err.Error() != want1 {
		t.Errorf("one-line block with two attributes: %v\nwant %s", err, want1)
	}
}

func TestParseEverything(t *testing.T) {
	src := `
max         = 3
timeout     = "2h"
env         = { CI = "1", GOFLAGS = "-mod=mod" }
retries     = 2
machine "gpu1" { per_machine = 1 }
machine "box" { per_machine = 4 }

task "a" {
  command  = ["make", "test"]
  env      = { GOFLAGS = "-mod=vendor", "X_Y" = "" }
  dir      = "./services//auth/"
  timeout  = "90s"
  retries  = 0
  needs    = ["gpu", "team=research", "gpu"]
  policy   = "/etc/postern/strict.hcl"
}
task "b.2" {
  command = ["curl", "-fsS", "https://vendor.example/install.sh"]
  network = "open"
  reason  = "  the vendor's installer needs any host "
}
task "c_3" {
  command = ["true"]
  network = "none"
}
`
	f, err := Parse("t.hcl", []byte(src))
	if err != nil {
		t.Fatal(err)
	}
	if f.Pool != nil || f.PerMachine != DefaultPerMachine || f.Max != 3 || !reflect.DeepEqual(f.Slots, map[string]int{"gpu1": 1, "box": 4}) {
		t.Errorf("file = %+v", f)
	}
	a, b, c := f.Tasks[0], f.Tasks[1], f.Tasks[2]
	if !reflect.DeepEqual(a.Env, map[string]string{"CI": "1", "GOFLAGS": "-mod=vendor", "X_Y": ""}) || a.Dir != "services/auth" ||
		a.Timeout != 90*time.Second || a.Retries != 0 || !reflect.DeepEqual(a.Needs, []string{"gpu", "team=research"}) ||
		a.Policy != "/etc/postern/strict.hcl" || a.Network != NetworkWall {
		t.Errorf("task a = %+v", a)
	}
	if b.Network != NetworkOpen || b.Reason != "the vendor's installer needs any host" || b.Timeout != 2*time.Hour || b.Retries != 2 ||
		!reflect.DeepEqual(b.Env, map[string]string{"CI": "1", "GOFLAGS": "-mod=mod"}) || b.Policy != "" {
		t.Errorf("task b = %+v", b)
	}
	if c.Network != NetworkNone || c.Policy != "" {
		t.Errorf("task c = %+v", c)
	}
	// Each task has its own env: changing one does not change another.
	a.Env["CI"] = "changed"
	if b.Env["CI"] != "1" {
		t.Error("tasks share their env map")
	}
}

func TestParseNetworkNoneDropsTheFilesPolicy(t *testing.T) {
	f, err := Parse("t.hcl", []byte(`policy = "p.hcl"
task "x" {
  command = ["true"]
  network = "none"
}`))
	if err != nil {
		t.Fatal(err)
	}
	if f.Tasks[0].Policy != "" || f.Tasks[0].PolicyPos != "" {
		t.Errorf("task = %+v: network none must allow nothing", f.Tasks[0])
	}
}

func TestParseErrors(t *testing.T) {
	cases := []struct {
		name, src, want string
	}{
		{"syntax", `task "a" { command = ["x" }`,
			`t.hcl:1:27: Missing item separator; Expected a comma to mark the beginning of the next item.`},
		{"no tasks", `per_machine = 2`,
			`t.hcl:1:1: no tasks; write at least one task: task "fix-auth" { command = ["my-agent", "fix the failing auth test"] }`},
		{"no command", `task "a" {}`,
			`t.hcl:1:1: task "a" has no command; write the program and its arguments: command = ["my-agent", "fix the failing auth test"]`},
		{"command as a string", `task "a" { command = "make test" }`,
			`t.hcl:1:22: command must be a list; a command is the program and its arguments, run without a shell; write command = ["make", "test"]`},
		{"command as a shell line", `task "a" { command = "make test | tee log" }`,
			`t.hcl:1:22: command must be a list; a command is the program and its arguments, run without a shell; write command = ["sh", "-c", "make test | tee log"]`},
		{"empty command", `task "a" { command = [] }`,
			`t.hcl:1:22: command is empty; write the program and its arguments, as in command = ["my-agent", "fix the failing auth test"]`},
		{"empty program", `task "a" { command = ["", "x"] }`,
			`t.hcl:1:23: the program's name is empty; the first entry is the program to run, as in command = ["make", "test"]`},
		{"number in command", `task "a" { command = ["sleep", 5] }`,
			`t.hcl:1:32: command entries must be strings; write each in quotes, as in command = ["my-agent", "fix the failing auth test"]`},
		{"bare word", `task "a" { command = [make] }`,
			`t.hcl:1:23: bare word make; write it in quotes: "make"`},
		{"interpolation", `task "a" { command = ["echo", "${HOME}"] }`,
			`t.hcl:1:31: interpolation is not available in a tasks file; write the value itself; to leave ${...} for a shell, write $${...}`},
		{"function", `task "a" { command = [upper("x")] }`,
			`t.hcl:1:23: functions are not available in a tasks file; write the value itself`},
		{"task without a name", `task { command = ["true"] }`,
			`t.hcl:1:1: a task has one name; write task "fix-auth" { command = [...] }`},
		{"task with two names", `task "a" "b" { command = ["true"] }`,
			`t.hcl:1:10: a task has one name; write task "fix-auth" { command = [...] }`},
		{"bad task name", `task "fix auth" { command = ["true"] }`,
			`t.hcl:1:6: bad task name "fix auth"; a task name has letters, digits, '.', '_' and '-', starts with a letter or digit, and has at most 63 characters, as in task "fix-auth"`},
		{"task twice", "task \"a\" { command = [\"true\"] }\ntask \"a\" { command = [\"false\"] }",
			`t.hcl:2:6: task "a" declared twice; it is first declared at t.hcl:1:1; give each task a name of its own`},
		{"misspelt attribute", `task "a" { comand = ["true"] }`,
			"t.hcl:1:1: task \"a\" has no command; write the program and its arguments: command = [\"my-agent\", \"fix the failing auth test\"]\n" +
				`t.hcl:1:12: unknown attribute "comand"; did you mean command? a task has only command, machines, needs, policy, network, reason, env, dir, timeout, retries, container`},
		{"borrowed word", "task \"a\" {\n  command = [\"true\"]\n  cwd = \"src\"\n}",
			`t.hcl:3:3: unknown attribute "cwd"; did you mean dir? a task has only command, machines, needs, policy, network, reason, env, dir, timeout, retries, container`},
		{"file attribute in a task", "task \"a\" {\n  command = [\"true\"]\n  per_machine = 2\n}",
			`t.hcl:3:3: per_machine belongs to the file or a machine, not a task; set per_machine and max at the top of the file, or a machine's own in machine "name" { per_machine = N }`},
		{"task attribute at the top", "command = [\"true\"]\ntask \"a\" { command = [\"true\"] }",
			`t.hcl:1:1: command belongs in a task; write it inside a task block: task "name" { command = ... }; the file's own settings are policy, machines, per_machine, retries, max, timeout, env`},
		{"unknown top attribute", "concurrency = 4\ntask \"a\" { command = [\"true\"] }",
			`t.hcl:1:1: unknown attribute "concurrency"; did you mean max? a tasks file has only policy, machines, per_machine, retries, max, timeout, env`},
		{"unknown block", "tsk \"a\" { command = [\"true\"] }\ntask \"b\" { command = [\"true\"] }",
			`t.hcl:1:1: unexpected block "tsk"; did you mean task? a tasks file has task "name" { ... } and machine "name" { per_machine = N } blocks`},
		{"block in a task", `task "a" {
  command = ["true"]
  env { A = "1" }
}`,
			`t.hcl:3:3: unexpected block "env" in task "a"; a task has only the attributes command, machines, needs, policy, network, reason, env, dir, timeout, retries, container; write for example env = { KEY = "value" }`},
		{"per_machine zero", "per_machine = 0\ntask \"a\" { command = [\"true\"] }",
			`t.hcl:1:15: per_machine out of range; write a whole number from 1 to 1024 without quotes, as in per_machine = 2`},
		{"per_machine quoted", "per_machine = \"2\"\ntask \"a\" { command = [\"true\"] }",
			`t.hcl:1:15: per_machine must be a number; write it without quotes: per_machine = 2`},
		{"retries fraction", "retries = 1.5\ntask \"a\" { command = [\"true\"] }",
			`t.hcl:1:11: retries out of range; write a whole number from 0 to 100 without quotes, as in retries = 1`},
		{"timeout number", "timeout = 30\ntask \"a\" { command = [\"true\"] }",
			`t.hcl:1:11: timeout must be a duration; write the unit too, in quotes: timeout = "30s" (or "30m")`},
		{"timeout bad", `task "a" {
  command = ["true"]
  timeout = "thirty minutes"
}`,
			`t.hcl:3:13: bad timeout "thirty minutes"; write a positive duration with its unit: "90s", "30m", "2h", "1h30m"; leave timeout out for no limit`},
		{"timeout negative", `task "a" {
  command = ["true"]
  timeout = "-5m"
}`,
			`t.hcl:3:13: bad timeout "-5m"; write a positive duration with its unit: "90s", "30m", "2h", "1h30m"; leave timeout out for no limit`},
		{"machines a string", "machines = \"gpu1\"\ntask \"a\" { command = [\"true\"] }",
			`t.hcl:1:12: machines must be a list; write machines = ["gpu1"]`},
		{"machines empty", "machines = []\ntask \"a\" { command = [\"true\"] }",
			`t.hcl:1:12: machines is empty; no task could be placed; name the pool, as in machines = ["gpu1", "box"], or leave machines out for every machine of the inventory`},
		{"bad machine name", "machines = [\"GPU 1\"]\ntask \"a\" { command = [\"true\"] }",
			`t.hcl:1:13: bad machine name "GPU 1"; bad machine name "GPU 1": use lowercase letters, digits, '.', '_' and '-', at most 63 characters`},
		{"machine twice", "machines = [\"box\", \"box\"]\ntask \"a\" { command = [\"true\"] }",
			`t.hcl:1:20: machine "box" listed twice; list it once; to give it more runs at once write machine "box" { per_machine = N }`},
		{"task machine outside the pool", "machines = [\"gpu1\", \"box\"]\ntask \"a\" {\n  command = [\"true\"]\n  machines = [\"gpu2\"]\n}",
			`t.hcl:4:14: machine "gpu2" of task "a" is not in the pool; the pool is machines = ["gpu1", "box"] at t.hcl:1:1; add "gpu2" to it, or take it out of the task`},
		{"task machines empty", "task \"a\" {\n  command = [\"true\"]\n  machines = []\n}",
			`t.hcl:3:14: machines is empty; the task could go nowhere; name machines, as in machines = ["box"], or leave machines out for the file's pool`},
		{"machine block outside the pool", "machines = [\"box\"]\nmachine \"gpu1\" { per_machine = 1 }\ntask \"a\" { command = [\"true\"] }",
			`t.hcl:2:9: machine "gpu1" is not in the pool; the pool is machines = ["box"] at t.hcl:1:1; add "gpu1" to it, or remove this block`},
		{"machine block sets nothing", "machine \"gpu1\" {}\ntask \"a\" { command = [\"true\"] }",
			`t.hcl:1:1: machine "gpu1" sets nothing; write machine "gpu1" { per_machine = 1 }, or remove the block`},
		{"machine block with labels", "machine \"gpu1\" {\n  per_machine = 1\n  labels = { gpu = \"a100\" }\n}\ntask \"a\" { command = [\"true\"] }",
			`t.hcl:3:3: unknown attribute "labels" in machine "gpu1"; a machine block in a tasks file sets only per_machine; how to reach the machine and its labels are the inventory's ('postern machine add', 'postern machine label')`},
		{"machine block twice", "machine \"box\" { per_machine = 1 }\nmachine \"box\" { per_machine = 2 }\ntask \"a\" { command = [\"true\"] }",
			`t.hcl:2:9: machine "box" declared twice; keep one block for it`},
		{"bad need", "task \"a\" {\n  command = [\"true\"]\n  needs = [\"gpu = a100\"]\n}",
			`t.hcl:3:12: bad need "gpu = a100"; a need is a label's name, as in "gpu" (the machine has the label), or name=value, as in "team=research"; names have letters, digits, '.', '_', '/' and '-'`},
		{"needs a string", "task \"a\" {\n  command = [\"true\"]\n  needs = \"gpu\"\n}",
			`t.hcl:3:11: needs must be a list; write needs = ["gpu"]`},
		{"unknown network", "task \"a\" {\n  command = [\"true\"]\n  network = \"host\"\n}",
			`t.hcl:3:13: unknown network "host"; write network = "wall" (behind the wall, judged by the policy; the default), network = "none" (behind the wall, nothing allowed) or network = "open" with reason = "why" (no wall)`},
		{"open without reason", "task \"a\" {\n  command = [\"true\"]\n  network = \"open\"\n}",
			`t.hcl:3:13: task "a" opens the network without a reason; a run without a wall is recorded with why; write reason = "the vendor's installer needs any host" beside network = "open"`},
		{"open with a blank reason", "task \"a\" {\n  command = [\"true\"]\n  network = \"open\"\n  reason = \"  \"\n}",
			`t.hcl:3:13: task "a" opens the network without a reason; a run without a wall is recorded with why; write reason = "the vendor's installer needs any host" beside network = "open"`},
		{"reason without open", "task \"a\" {\n  command = [\"true\"]\n  reason = \"because\"\n}",
			`t.hcl:3:3: reason without an open network; a reason is recorded for a run without a wall; write network = "open" beside it, or remove the reason`},
		{"none with a policy", "task \"a\" {\n  command = [\"true\"]\n  network = \"none\"\n  policy = \"p.hcl\"\n}",
			`t.hcl:4:3: task "a" has a policy and network = "none"; "none" allows nothing whatever the policy says; remove one of them`},
		{"env a list", "env = [\"A=1\"]\ntask \"a\" { command = [\"true\"] }",
			`t.hcl:1:7: env must be a map; write env = { NAME = "value" }`},
		{"env bad name", "env = { \"A-B\" = \"1\" }\ntask \"a\" { command = [\"true\"] }",
			`t.hcl:1:9: bad environment variable name; a name has letters, digits and '_' and does not start with a digit, as in env = { GOFLAGS = "-mod=mod" }`},
		{"env number", "env = { JOBS = 4 }\ntask \"a\" { command = [\"true\"] }",
			`t.hcl:1:16: env JOBS must be a string; an environment holds strings; write it in quotes: JOBS = "4"`},
		{"env twice", "env = { A = \"1\", A = \"2\" }\ntask \"a\" { command = [\"true\"] }",
			`t.hcl:1:18: env A set twice; keep one`},
		{"dir absolute", "task \"a\" {\n  command = [\"true\"]\n  dir = \"/srv/app\"\n}",
			`t.hcl:3:9: bad dir "/srv/app"; the task runs in its own copy of the work, on its machine, where this path means nothing; write a directory relative to where the dispatch is started, as in dir = "services/auth"`},
		{"dir above", "task \"a\" {\n  command = [\"true\"]\n  dir = \"a/../../b\"\n}",
			`t.hcl:3:9: bad dir "a/../../b"; a task's directory lies inside the work it is given; write one below where the dispatch is started, as in dir = "services/auth"`},
		{"policy tilde", "policy = \"~/p.hcl\"\ntask \"a\" { command = [\"true\"] }",
			`t.hcl:1:10: bad policy path "~/p.hcl"; no shell expands ~ here; write the path relative to this file, or absolute`},
		{"policy a list", "policy = [\"p.hcl\"]\ntask \"a\" { command = [\"true\"] }",
			`t.hcl:1:10: policy must be a string; write policy = "..."`},
		{"null", "max = null\ntask \"a\" { command = [\"true\"] }",
			`t.hcl:1:7: null value; write a value, or leave the attribute out for its default`},
		{"several at once, in file order", "per_machine = 0\ntask \"a\" {\n  command = \"x\"\n  timeout = \"1y\"\n}",
			"t.hcl:1:15: per_machine out of range; write a whole number from 1 to 1024 without quotes, as in per_machine = 2\n" +
				"t.hcl:3:13: command must be a list; a command is the program and its arguments, run without a shell; write command = [\"x\"]\n" +
				`t.hcl:4:13: bad timeout "1y"; write a positive duration with its unit: "90s", "30m", "2h", "1h30m"; leave timeout out for no limit`},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			_, err := Parse("t.hcl", []byte(c.src))
			var pe *ParseError
			if !errors.As(err, &pe) {
				t.Fatalf("Parse = %v, want a *ParseError", err)
			}
			if got := err.Error(); got != c.want {
				t.Fatalf("error:\n%s\nwant:\n%s", got, c.want)
			}
		})
	}
}

func TestLoad(t *testing.T) {
	dir := t.TempDir()
	p := filepath.Join(dir, "tasks.hcl")
	if err := os.WriteFile(p, []byte("policy = \"pol/a.hcl\"\ntask \"a\" { command = [\"true\"] }\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	f, err := Load(p)
	if err != nil {
		t.Fatal(err)
	}
	if f.Filename != p || f.Tasks[0].Policy != filepath.Join(dir, "pol", "a.hcl") {
		t.Errorf("Load = %+v: a relative policy is taken from the tasks file's directory", f)
	}
	if _, err := Load(filepath.Join(dir, "missing.hcl")); err == nil || !strings.Contains(err.Error(), "missing.hcl") || !errors.Is(err, os.ErrNotExist) {
		t.Errorf("Load of a missing file = %v", err)
	}
}

func FuzzParse(f *testing.F) {
	f.Add([]byte(`policy = "p.hcl"
machines = ["gpu1", "box"]
per_machine = 2
retries = 1
machine "box" { per_machine = 3 }
task "fix-auth" { command = ["my-agent", "fix it"]  needs = ["gpu"] }
task "docs" {
  command = ["sh", "-c", "make docs"]
  machines = ["box"]
  env = { A = "1" }
  dir = "docs"
  timeout = "5m"
  network = "open"
  reason = "r"
}`))
	f.Add([]byte(`task "a" { command = "x" }`))
	f.Add([]byte("task \"a\" { command = [\"${x}\"] }\nenv = { 1 = 2 }"))
	f.Fuzz(func(t *testing.T, src []byte) {
		file, err := Parse("f.hcl", src)
		if err != nil {
			var pe *ParseError
			if !errors.As(err, &pe) || len(pe.Diags) == 0 {
				t.Fatalf("Parse error %v is not a *ParseError with diagnostics", err)
			}
			return
		}
		if len(file.Tasks) == 0 || file.PerMachine < 1 {
			t.Fatalf("parsed %+v", file)
		}
		names := map[string]bool{}
		for _, task := range file.Tasks {
			if names[task.Name] || !taskNameRE().MatchString(task.Name) {
				t.Fatalf("task name %q twice or bad", task.Name)
			}
			names[task.Name] = true
			if len(task.Command) == 0 || strings.TrimSpace(task.Command[0]) == "" {
				t.Fatalf("task %q has command %q", task.Name, task.Command)
			}
			if task.Network == NetworkOpen && task.Reason == "" {
				t.Fatalf("task %q open without a reason", task.Name)
			}
			if task.Network == NetworkNone && task.Policy != "" {
				t.Fatalf("task %q network none with policy %q", task.Name, task.Policy)
			}
			if strings.HasPrefix(task.Dir, "/") || strings.HasPrefix(task.Dir, "..") || task.Timeout < 0 || task.Retries < 0 {
				t.Fatalf("task %+v", task)
			}
		}
		for name, n := range file.Slots {
			if n < 1 {
				t.Fatalf("machine %q slots %d", name, n)
			}
		}
	})
}

func TestExampleTasksFile(t *testing.T) {
	f, err := Load(filepath.Join("..", "..", "examples", "tasks.hcl"))
	if err != nil {
		t.Fatal(err)
	}
	if len(f.Tasks) != 4 || f.Slots["gpu1"] != 1 || f.Tasks[2].Needs[0] != "gpu" || f.Tasks[3].Network != NetworkNone {
		t.Errorf("example = %+v", f)
	}
	for _, task := range f.Tasks {
		if task.Policy == "" {
			continue
		}
		if _, err := policy.Load(task.Policy); err != nil {
			t.Errorf("task %s: %v", task.Name, err)
		}
	}
}

func TestParseContainer(t *testing.T) {
	f := mustParse(t, "task \"c\" {\n  command = [\"x\"]\n  container = \" busybox:1 \"\n}\n")
	if f.Tasks[0].Container != "busybox:1" {
		t.Fatalf("container = %q", f.Tasks[0].Container)
	}
	for _, bad := range []string{`""`, `"-v /:/host"`, `"a b"`, `["busybox"]`} {
		_, err := Parse("t.hcl", []byte("task \"c\" {\n  command = [\"x\"]\n  container = "+bad+"\n}\n"))
		if err == nil || !strings.Contains(err.Error(), "t.hcl:3:") {
			t.Errorf("container = %s: %v, want an error at t.hcl:3", bad, err)
		}
	}
}

// TestTaskRecordKeepsEnvNamesOnly: a task's environment values (secrets, as
// often as not) never reach its record's JSON; the names do.
func TestTaskRecordKeepsEnvNamesOnly(t *testing.T) {
	secret := "sk-live-0123456789abcdef"
	rec := &Record{Tasks: []TaskRecord{{Name: "t", Spec: Task{Name: "t", Command: []string{"true"}, Env: map[string]string{"API_KEY": secret, "B": "x"}}}}}
	b, err := json.Marshal(rec)
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(string(b), secret) || !strings.Contains(string(b), `"env_names":["API_KEY","B"]`) {
		t.Fatalf("record JSON: %s", b)
	}
}
