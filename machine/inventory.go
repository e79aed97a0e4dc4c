package machine

import (
	"fmt"
	"os"

	"github.com/hashicorp/hcl/v2"
	"github.com/hashicorp/hcl/v2/hclsyntax"
	"github.com/postern-dev/postern/internal/hcldecode"
)

// inventoryFile is the HCL inventory:
//
//	machine "gpu1" {
//	  ssh       = "gpu1"            # alias from ~/.ssh/config, or [user@]host[:port]
//	  identity  = "~/.ssh/id_ed25519"
//	  agent_dir = "/opt/postern"    # where the agent is installed
//	  labels    = { gpu = "a100" }
//	  env       = ["ANTHROPIC_API_KEY"] # passed to every run, values from postern's environment
//	  per_machine = 2               # runs of a dispatch at once on it
//	}
type inventoryFile struct {
	Machines []inventoryMachine
}

type inventoryMachine struct {
	Name     string
	SSH      string
	Identity string
	AgentDir string
	Labels   map[string]string
	Env      []string
	// PerMachine is the machine's own slots for dispatches; 0 is unset.
	PerMachine int
	Range      hcl.Range // the block's header
}

// The inventory's schema, decoded by hand rather than with gohcl: gohcl
// brings in hclwrite and go-cmp, whose package initialisation every start of
// postern would pay for, the wall's re-executed stages included.
var (
	inventorySchema = &hcl.BodySchema{Blocks: []hcl.BlockHeaderSchema{{Type: "machine", LabelNames: []string{"name"}}}}
	// In name order, as gohcl lists them: a misspelt name is offered the
	// first of the nearest.
	machineSchema = &hcl.BodySchema{Attributes: []hcl.AttributeSchema{
		{Name: "agent_dir"},
		{Name: "env"},
		{Name: "identity"},
		{Name: "labels"},
		{Name: "per_machine"},
		{Name: "ssh", Required: true},
	}}
)

// decodeInventory decodes body as gohcl.DecodeBody would into the structs
// above: the same schema, conversions and diagnostics.
func decodeInventory(body hcl.Body) (inventoryFile, hcl.Diagnostics) {
	var inv inventoryFile
	content, diags := body.Content(inventorySchema)
	if content == nil {
		return inv, diags
	}
	for _, b := range content.Blocks {
		if b.Type != "machine" {
			continue
		}
		m := inventoryMachine{Name: b.Labels[0], Range: b.DefRange}
		mc, mdiags := b.Body.Content(machineSchema)
		diags = append(diags, mdiags...)
		if mc != nil {
			diags = append(diags, hcldecode.Attr(mc.Attributes["ssh"], &m.SSH)...)
			diags = append(diags, hcldecode.Attr(mc.Attributes["identity"], &m.Identity)...)
			diags = append(diags, hcldecode.Attr(mc.Attributes["agent_dir"], &m.AgentDir)...)
			diags = append(diags, hcldecode.Attr(mc.Attributes["labels"], &m.Labels)...)
			diags = append(diags, hcldecode.Attr(mc.Attributes["env"], &m.Env)...)
			diags = append(diags, hcldecode.Attr(mc.Attributes["per_machine"], &m.PerMachine)...)
		}
		inv.Machines = append(inv.Machines, m)
	}
	return inv, diags
}

// InventoryError is an inventory that cannot be used; its message has
// file:line:col for each problem.
type InventoryError struct{ Diags hcl.Diagnostics }

func (e *InventoryError) Error() string { return hcldecode.Message(e.Diags) }

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
	inv, diags := decodeInventory(f.Body)
	if diags.HasErrors() {
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
		if im.PerMachine < 0 || im.PerMachine > 1024 {
			bad(fmt.Sprintf("per_machine = %d is out of range", im.PerMachine), "write how many runs of a dispatch the machine takes at once, from 1 to 1024, or leave it out to take the tasks file's")
			continue
		}
		out = append(out, Machine{Name: im.Name, SSH: im.SSH, Identity: im.Identity, AgentDir: im.AgentDir, Labels: im.Labels, Env: im.Env, PerMachine: im.PerMachine})
	}
	if len(errs) > 0 {
		return nil, &InventoryError{errs}
	}
	return out, nil
}
