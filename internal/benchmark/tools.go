//go:build linux

package benchmark

import (
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"slices"
	"strings"
)

// Tool is a program some rows of a benchmark need, and the Debian package
// that has it.
type Tool struct {
	Program string
	Package string
	// Rows names what cannot be measured without it.
	Rows string
}

// The tools the benchmarks compare with or measure through.
var (
	ToolSquid     = Tool{"squid", "squid", "the squid rows"}
	ToolTinyproxy = Tool{"tinyproxy", "tinyproxy", "the tinyproxy rows"}
	ToolWrk       = Tool{"wrk", "wrk", "the keep-alive requests rows"}
	ToolBwrap     = Tool{"bwrap", "bubblewrap", "the bubblewrap start-up row"}
	ToolNginx     = Tool{"nginx", "nginx", "the inspected HTTPS upstream (nginx serves it)"}
	ToolNpm       = Tool{"npm", "npm", "the sandbox-runtime start-up row (npm installs it)"}
	// sandbox-runtime itself needs these on Linux.
	ToolRipgrep = Tool{"rg", "ripgrep", "the sandbox-runtime start-up row (it runs ripgrep)"}
	ToolSocat   = Tool{"socat", "socat", "the sandbox-runtime start-up row (it runs socat)"}
	// ToolParallel is GNU parallel, which the fleet dispatch is compared with.
	ToolParallel = Tool{"parallel", "parallel", "the GNU parallel --sshlogin row of the fleet dispatch"}
	// The remote machines of the fleet and workspace benchmarks are OpenSSH
	// servers on test hosts, reached with its client; workspaces compare
	// with rsync.
	ToolSshd  = Tool{"sshd", "openssh-server", "the test machines of the fleet and workspace benchmarks"}
	ToolSsh   = Tool{"ssh", "openssh-client", "the fleet and workspace benchmarks"}
	ToolRsync = Tool{"rsync", "rsync", "the workspace benchmark's rsync row"}
)

// toolPlan is what to do about missing tools: install the packages, or tell
// the person the one command that would.
type toolPlan struct {
	Install []string // packages for apt-get to install now
	Tell    string   // the apt-get line to print instead; "" when installing or nothing is missing
}

// planTools decides: as root with apt-get, install what is missing (as CI
// does); otherwise print the line and measure what can be.
func planTools(missing []Tool, root, haveAptGet bool) toolPlan {
	var pkgs []string
	for _, t := range missing {
		if !slices.Contains(pkgs, t.Package) {
			pkgs = append(pkgs, t.Package)
		}
	}
	slices.Sort(pkgs)
	switch {
	case len(pkgs) == 0:
		return toolPlan{}
	case root && haveAptGet:
		return toolPlan{Install: pkgs}
	}
	return toolPlan{Tell: "apt-get install -y " + strings.Join(pkgs, " ")}
}

// toolEnv is what ensureTools reaches the system through; tests replace it.
type toolEnv struct {
	lookPath func(string) (string, error)
	run      func(ctx context.Context, name string, args ...string) ([]byte, error)
	root     bool
}

func systemToolEnv() toolEnv {
	return toolEnv{
		lookPath: exec.LookPath,
		run: func(ctx context.Context, name string, args ...string) ([]byte, error) {
			cmd := exec.CommandContext(ctx, name, args...)
			cmd.Env = append(os.Environ(), "DEBIAN_FRONTEND=noninteractive")
			return cmd.CombinedOutput()
		},
		root: os.Geteuid() == 0,
	}
}

// EnsureTools makes sure the tools are on this machine: as root where apt-get
// exists it runs 'apt-get update' and installs the missing ones' packages;
// elsewhere it prints the one apt-get line that would. It returns, for each
// tool still missing, why, in words for a report's "not measured" rows.
func EnsureTools(ctx context.Context, w io.Writer, tools []Tool) map[string]string {
	return ensureTools(ctx, w, tools, systemToolEnv())
}

func ensureTools(ctx context.Context, w io.Writer, tools []Tool, env toolEnv) map[string]string {
	missingNow := func() []Tool {
		var m []Tool
		for _, t := range tools {
			if _, err := env.lookPath(t.Program); err != nil {
				m = append(m, t)
			}
		}
		return m
	}
	missing := missingNow()
	_, aptErr := env.lookPath("apt-get")
	plan := planTools(missing, env.root, aptErr == nil)
	why := ""
	switch {
	case plan.Tell != "":
		fmt.Fprintf(w, "benchmark: missing %s; install with:\n  %s\nmeasuring the rest.\n", programs(missing), plan.Tell)
		why = "run '" + plan.Tell + "'"
	case len(plan.Install) > 0:
		fmt.Fprintf(w, "benchmark: installing %s (apt-get) for %s\n", strings.Join(plan.Install, " "), programs(missing))
		if out, err := env.run(ctx, "apt-get", "update", "-qq"); err != nil {
			why = fmt.Sprintf("apt-get update failed: %v: %s", err, lastLines(string(out), 3))
			break
		}
		args := append([]string{"install", "-y", "-qq", "--no-install-recommends"}, plan.Install...)
		if out, err := env.run(ctx, "apt-get", args...); err != nil {
			why = fmt.Sprintf("apt-get install %s failed: %v: %s", strings.Join(plan.Install, " "), err, lastLines(string(out), 3))
			break
		}
		missing = missingNow()
		why = "apt-get installed " + strings.Join(plan.Install, " ") + " but it is still not in PATH"
	}
	out := map[string]string{}
	for _, t := range missing {
		out[t.Program] = fmt.Sprintf("not measured: %s not found, needed for %s (%s)", t.Program, t.Rows, why)
	}
	return out
}

func programs(ts []Tool) string {
	names := make([]string, len(ts))
	for i, t := range ts {
		names[i] = t.Program
	}
	return strings.Join(names, ", ")
}
