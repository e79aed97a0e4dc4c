package config

import (
	"slices"
	"testing"

	"github.com/hashicorp/hcl/v2"
	"github.com/hashicorp/hcl/v2/gohcl"
	"github.com/hashicorp/hcl/v2/hclsyntax"
)

// gohclFile is file as gohcl decoded it before the hand decoder.
type gohclFile struct {
	Policy         string         `hcl:"policy,optional"`
	Machine        string         `hcl:"machine,optional"`
	ConnectTimeout string         `hcl:"connect_timeout,optional"`
	SSH            *gohclSSHBlock `hcl:"ssh,block"`
}

type gohclSSHBlock struct {
	Config     string `hcl:"config,optional"`
	KnownHosts string `hcl:"known_hosts,optional"`
}

// TestDecodeAsGohcl: the hand decoder takes and refuses what gohcl did, with
// the same diagnostics and values.
func TestDecodeAsGohcl(t *testing.T) {
	for _, src := range []string{
		``,
		`policy = "~/p.hcl"`,
		"policy = \"a\"\nmachine = \"gpu1\"\nconnect_timeout = \"10s\"\nssh {\n config = \"c\"\n known_hosts = \"k\"\n}\n",
		`machine = 12`,
		`machine = true`,
		`machine = null`,
		`machine = ["a"]`,
		`machine = {a = 1}`,
		`policy = var.x`,
		`policy = "${1 + 1}"`,
		"ssh {}\n",
		"ssh {}\nssh {}\n",
		"ssh \"label\" {}\n",
		"ssh {\n other = 1\n}\n",
		"ssh {\n config = 3\n}\n",
		`unknown = "x"`,
		"other {}\n",
		"policy = \"a\"\npolicy = \"b\"\n",
	} {
		f, diags := hclsyntax.ParseConfig([]byte(src), "c.hcl", hcl.InitialPos)
		if diags.HasErrors() {
			continue
		}
		got, gd := decodeFile(f.Body)
		var want gohclFile
		wd := gohcl.DecodeBody(f.Body, nil, &want)
		if a, b := diagTexts(gd), diagTexts(wd); !slices.Equal(a, b) {
			t.Errorf("%q: diagnostics\n%q\nwant (gohcl)\n%q", src, a, b)
			continue
		}
		if gd.HasErrors() {
			continue
		}
		if got.Policy != want.Policy || got.Machine != want.Machine || got.ConnectTimeout != want.ConnectTimeout ||
			(got.SSH == nil) != (want.SSH == nil) || (got.SSH != nil && (got.SSH.Config != want.SSH.Config || got.SSH.KnownHosts != want.SSH.KnownHosts)) {
			t.Errorf("%q: decoded %+v (ssh %+v), gohcl %+v (ssh %+v)", src, got, got.SSH, want, want.SSH)
		}
	}
}

// FuzzDecodeAsGohcl: on any text that parses, the hand decoder and gohcl
// give the same diagnostics, and the same values when there are none.
func FuzzDecodeAsGohcl(f *testing.F) {
	f.Add("policy = \"a\"\nmachine = \"gpu1\"\nconnect_timeout = \"10s\"\nssh {\n config = \"c\"\n known_hosts = \"k\"\n}\n")
	f.Add("ssh {}\nssh {}\n")
	f.Add("machine = 12\n")
	f.Fuzz(func(t *testing.T, src string) {
		file, diags := hclsyntax.ParseConfig([]byte(src), "c.hcl", hcl.InitialPos)
		if diags.HasErrors() {
			return
		}
		got, gd := decodeFile(file.Body)
		var want gohclFile
		wd := gohcl.DecodeBody(file.Body, nil, &want)
		if a, b := diagTexts(gd), diagTexts(wd); !slices.Equal(a, b) {
			t.Fatalf("%q: diagnostics\n%q\nwant (gohcl)\n%q", src, a, b)
		}
		if gd.HasErrors() {
			return
		}
		if got.Policy != want.Policy || got.Machine != want.Machine || got.ConnectTimeout != want.ConnectTimeout ||
			(got.SSH == nil) != (want.SSH == nil) || (got.SSH != nil && (got.SSH.Config != want.SSH.Config || got.SSH.KnownHosts != want.SSH.KnownHosts)) {
			t.Fatalf("%q: decoded %+v (ssh %+v), gohcl %+v (ssh %+v)", src, got, got.SSH, want, want.SSH)
		}
	})
}

// diagTexts are the diagnostics as a person reads them, sorted: gohcl
// decodes a body's attributes in map order.
func diagTexts(ds hcl.Diagnostics) []string {
	out := make([]string, 0, len(ds))
	for _, d := range ds {
		out = append(out, d.Error())
	}
	slices.Sort(out)
	return out
}
