package policy

import (
	"net/netip"
	"strings"
	"testing"
)

const guardrailSrc = `mode  = "observe"
ports = [443]
allow = ["anthropic.com", "github.com"]
guardrail "model" {
  address = "127.0.0.1:4000"
  hosts   = ["api.anthropic.com", "api.openai.com"]
  env     = ["ANTHROPIC_BASE_URL", "OPENAI_BASE_URL"]
}
guardrail "second" {
  address = "[::1]:4100"
  hosts   = ["other.test"]
}
`

func TestGuardrailSealsItsHosts(t *testing.T) {
	p, err := Parse("g.hcl", []byte(guardrailSrc))
	if err != nil {
		t.Fatal(err)
	}
	if len(p.Guardrails) != 2 || p.Guardrails[0].Address != netip.MustParseAddrPort("127.0.0.1:4000") || p.Guardrails[1].Address != netip.MustParseAddrPort("[::1]:4100") {
		t.Fatalf("guardrails %+v", p.Guardrails)
	}
	g := &p.Guardrails[0]
	if g.URL(0) != "http://198.19.255.1:4000" || g.EnvName() != "POSTERN_GUARDRAIL_MODEL_URL" {
		t.Fatalf("url %s env %s", g.URL(0), g.EnvName())
	}
	// Unsealed, the policy applies as written (observe mode allows).
	if d := p.DecideName("api.anthropic.com", 443); d.Verdict != Allow || d.Sealed {
		t.Fatalf("unsealed: %+v", d)
	}
	s := p.Sealing()
	for _, name := range []string{"api.anthropic.com", "eu.api.anthropic.com", "api.openai.com"} {
		d := s.DecideName(name, 443)
		if d.Verdict != Deny || !d.Sealed || d.WouldDeny || !strings.Contains(d.Reason, name+" is sealed: reach it through guardrail model at $ANTHROPIC_BASE_URL") {
			t.Fatalf("sealed %s (observe mode): %+v", name, d)
		}
	}
	if d := s.DecideName("github.com", 443); d.Verdict != Allow {
		t.Fatalf("a host no guardrail seals: %+v", d)
	}
	// Resolved addresses of a sealed name are sealed too.
	if d := s.DecideAddr(netip.MustParseAddr("8.8.8.8"), 443, "api.openai.com"); d.Verdict != Deny || !d.Sealed {
		t.Fatalf("address of a sealed name: %+v", d)
	}
	if gr, i := s.GuardrailAt(netip.MustParseAddr("198.19.255.2")); gr == nil || gr.Name != "second" || i != 1 {
		t.Fatalf("GuardrailAt: %+v %d", gr, i)
	}
	if gr, _ := s.GuardrailAt(netip.MustParseAddr("198.19.255.3")); gr != nil {
		t.Fatalf("an address no guardrail has: %+v", gr)
	}
}

func TestGuardrailErrors(t *testing.T) {
	for _, tc := range []struct{ src, want string }{
		{`guardrail "model" { hosts = ["a.test"] }`, `guardrail "model" has no address`},
		{`guardrail "model" { address = "127.0.0.1:4000" }`, `guardrail "model" seals no host`},
		{`guardrail "model" { address = "localhost:4000"  hosts = ["a.test"] }`, `invalid guardrail address "localhost:4000"`},
		{`guardrail "model" { address = "127.0.0.1:0"  hosts = ["a.test"] }`, `give the port it listens on`},
		{`guardrail "Model" { address = "127.0.0.1:1"  hosts = ["a.test"] }`, `invalid guardrail name "Model"`},
		{`guardrail "m" { address = "127.0.0.1:1"  hosts = ["a.test:443"] }`, `seals a host on every port`},
		{`guardrail "m" { address = "127.0.0.1:1"  hosts = ["*.a.test"] }`, `covers its subdomains already`},
		{`guardrail "m" { address = "127.0.0.1:1"  hosts = ["https://a.test/v1"] }`, `not a URL`},
		{`guardrail "m" { address = "127.0.0.1:1"  hosts = ["a.test"]  env = ["POSTERN_X"] }`, `invalid env entry "POSTERN_X"`},
		{`guardrail "m" { address = "127.0.0.1:1"  hosts = ["a.test"]  adress = "x" }`, `did you mean address?`},
		{"guardrail \"m\" { address = \"127.0.0.1:1\"  hosts = [\"a.test\"] }\nguardrail \"m\" { address = \"127.0.0.1:2\"  hosts = [\"b.test\"] }", `a second guardrail "m"`},
		{`guardrail { address = "127.0.0.1:1"  hosts = ["a.test"] }`, `a guardrail block has one name`},
	} {
		src := strings.NewReplacer("{ ", "{\n", "  ", "\n", " }", "\n}").Replace(tc.src)
		_, err := Parse("g.hcl", []byte(src))
		if err == nil || !strings.Contains(err.Error(), tc.want) || !strings.Contains(err.Error(), "g.hcl:") {
			t.Errorf("%s:\n got %v\nwant %q with its position", tc.src, err, tc.want)
		}
	}
}
