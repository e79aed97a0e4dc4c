package machine

import (
	"fmt"
	"os"
	"strings"

	"github.com/hashicorp/hcl/v2"
	"github.com/hashicorp/hcl/v2/gohcl"
	"github.com/hashicorp/hcl/v2/hclsyntax"
)

// inventoryFile is the HCL inventory:
//
//	machine "gpu1" {
//	  ssh       = "gpu1"            # alias from ~/.ssh/config, or [user@]host[:port]
//	  identity  = "~/.ssh/id_ed25519"
//	  agent_dir = "/opt/postern"    # where the agent is installed
//	  labels    = { gpu = "a100" }
//	  env       = ["ANTHROPIC_API_KEY"] # passed to every run, values from postern's environment
//	}
type inventoryFile struct {
	Machines []inventoryMachine `hcl:"machine,block"`
}

type inventoryMachine struct {
	Name     string            `hcl:"name,label"`
	SSH      string            `hcl:"ssh"`
	Identity string            `hcl:"identity,optional"`
	AgentDir string            `hcl:"agent_dir,optional"`
	Labels   map[string]string `hcl:"labels,optional"`
	Env      []string          `hcl:"env,optional"`
	Range    hcl.Range         `hcl:",def_range"`
}

// InventoryError is an inventory that cannot be used; its message has
// file:line:col for each problem.
type InventoryError struct{ Diags hcl.Diagnostics }

func (e *InventoryError) Error() string {
	var b strings.Builder
	for i, d := range e.Diags {
		if i > 0 {
			b.WriteString("; ")
		}
		if d.Subject != nil {
			fmt.Fprintf(&b, "%s:%d:%d: ", d.Subject.Filename, d.Subject.Start.Line, d.Subject.Start.Column)
		}
		b.WriteString(d.Summary)
		if d.Detail != "" {
			b.WriteString(": " + d.Detail)
		}
	}
	return b.String()
}

// LoadInventory reads an inventory file.
func LoadInventory(path string) ([]Machine, error) {
	src, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("read inventory: %w", err)
	}
	return ParseInventory(path, src)
}

// ParseInventory parses HCL machine blocks. It records how to reach each machine,
// never what it can do: imported machines are unmeasured.
func ParseInventory(filename string, src []byte) ([]Machine, error) {
	f, diags := hclsyntax.ParseConfig(src, filename, hcl.InitialPos)
	if diags.HasErrors() {
		return nil, &InventoryError{diags}
	}
	var inv inventoryFile
	if diags := gohcl.DecodeBody(f.Body, nil, &inv); diags.HasErrors() {
		return nil, &InventoryError{diags}
	}
	var out []Machine
	seen := map[string]hcl.Range{}
	var errs hcl.Diagnostics
	for _, im := range inv.Machines {
		r := im.Range
		bad := func(summary, detail string) {
			errs = append(errs, &hcl.Diagnostic{Severity: hcl.DiagError, Summary: summary, Detail: detail, Subject: &r})
		}
		if err := CheckName(im.Name); err != nil {
			bad("bad machine name", err.Error())
			continue
		}
		if im.Name == Local {
			bad("machine \"local\" cannot be declared", "local exists without being added; remove this block")
			continue
		}
		if prev, dup := seen[im.Name]; dup {
			bad("machine declared twice", fmt.Sprintf("%q is first declared at %s; keep one block", im.Name, prev))
			continue
		}
		seen[im.Name] = r
		if _, err := ParseDest(im.SSH); err != nil {
			bad("bad ssh destination", err.Error()+`; write ssh = "alias" or ssh = "user@host:port"`)
			continue
		}
		badEnv := false
		for _, n := range im.Env {
			if err := CheckEnvName(n); err != nil {
				bad("bad env name", err.Error()+`; write env = ["NAME", ...]: names only, the values come from postern's environment at each run`)
				badEnv = true
				break
			}
		}
		if badEnv {
			continue
		}
		out = append(out, Machine{Name: im.Name, SSH: im.SSH, Identity: im.Identity, AgentDir: im.AgentDir, Labels: im.Labels, Env: im.Env})
	}
	if len(errs) > 0 {
		return nil, &InventoryError{errs}
	}
	return out, nil
}
