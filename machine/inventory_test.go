package machine

import (
	"reflect"
	"slices"
	"testing"

	"github.com/hashicorp/hcl/v2"
	"github.com/hashicorp/hcl/v2/gohcl"
	"github.com/hashicorp/hcl/v2/hclsyntax"
)

// gohclInventory is the inventory's structs as gohcl decodes them, the
// reference decodeInventory is held to.
type gohclInventory struct {
	Machines []struct {
		Name     string            `hcl:"name,label"`
		SSH      string            `hcl:"ssh"`
		Identity string            `hcl:"identity,optional"`
		AgentDir string            `hcl:"agent_dir,optional"`
		Labels   map[string]string `hcl:"labels,optional"`
		Env      []string          `hcl:"env,optional"`
		Range    hcl.Range         `hcl:",def_range"`
	} `hcl:"machine,block"`
}

var inventorySamples = []string{
	`machine "a" { ssh = "x" }`,
	`machine "b" { ssh = "u@h:22" labels = { k = "v" } }`,
	"machine \"gpu1\" {\n  ssh = \"gpu1\"\n  identity = \"~/.ssh/id\"\n  agent_dir = \"/opt/p\"\n  labels = { gpu = \"a100\", n = 4 }\n}\nmachine \"ci\" { ssh = \"r@10.0.0.5:2222\" }\n",
	`machine "a" {}`,
	`machine "a" { ssh = 5 }`,
	`machine "a" { ssh = ["x"] }`,
	`machine "a" { ssh = null }`,
	`machine "a" { ssh = "x" labels = "y" }`,
	`machine "a" { ssh = "x" labels = { k = ["v"] } }`,
	`machine "a" { ssh = "x" labels = { k = null } }`,
	`machine "a" { ssh = "x" labels = null }`,
	`machine "a" { ssh = "x" identity = true }`,
	`machine "a" { ssh = "x" env = ["A", "B_2"] }`,
	`machine "a" { ssh = "x" env = [] }`,
	`machine "a" { ssh = "x" env = "A" }`,
	`machine "a" { ssh = "x" env = [1, true] }`,
	`machine "a" { ssh = "x" env = [null] }`,
	`machine "a" { ssh = "x" env = null }`,
	`machine "a" { ssh = "${x}" }`,
	"machine \"a\" {\n ssh = \"x\"\n rungs = {}\n}",
	`machine { ssh = "x" }`,
	`machine "a" "b" { ssh = "x" }`,
	`other "a" { ssh = "x" }`,
	`ssh = "x"`,
	`machine "a" { ssh = "x" inner {} }`,
	"machine \"a\" { ssh = \"x\" }\nmachine \"a\" { ssh = \"y\" }",
}

// TestDecodeInventoryAsGohcl: the hand decoder gives what gohcl gives, values
// and diagnostics alike, on valid and invalid inventories.
func TestDecodeInventoryAsGohcl(t *testing.T) {
	for _, src := range inventorySamples {
		checkDecodeAsGohcl(t, src)
	}
}

func FuzzDecodeInventoryAsGohcl(f *testing.F) {
	for _, src := range inventorySamples {
		f.Add(src)
	}
	f.Fuzz(checkDecodeAsGohcl)
}

func checkDecodeAsGohcl(t *testing.T, src string) {
	file, diags := hclsyntax.ParseConfig([]byte(src), "m.hcl", hcl.InitialPos)
	if diags.HasErrors() {
		return
	}
	var want gohclInventory
	wantDiags := gohcl.DecodeBody(file.Body, nil, &want)
	got, gotDiags := decodeInventory(file.Body)
	if a, b := diagTexts(gotDiags), diagTexts(wantDiags); !slices.Equal(a, b) {
		t.Fatalf("%q: diagnostics\n%q\nwant (gohcl)\n%q", src, a, b)
	}
	if wantDiags.HasErrors() {
		return // gohcl leaves a partial result; only the diagnostics count
	}
	if len(got.Machines) != len(want.Machines) {
		t.Fatalf("%q: %d machines, gohcl %d", src, len(got.Machines), len(want.Machines))
	}
	for i, w := range want.Machines {
		g := got.Machines[i]
		if g.Name != w.Name || g.SSH != w.SSH || g.Identity != w.Identity || g.AgentDir != w.AgentDir ||
			!reflect.DeepEqual(g.Labels, w.Labels) || !reflect.DeepEqual(g.Env, w.Env) || g.Range != w.Range {
			t.Fatalf("%q: machine %d = %+v, gohcl %+v", src, i, g, w)
		}
	}
}

// diagTexts are the diagnostics as a person reads them, sorted: gohcl
// decodes a block's attributes in map order.
func diagTexts(ds hcl.Diagnostics) []string {
	out := make([]string, 0, len(ds))
	for _, d := range ds {
		out = append(out, d.Error())
	}
	slices.Sort(out)
	return out
}
