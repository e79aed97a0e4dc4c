package netwall

import (
	"bytes"
	"errors"
	"fmt"
	"net/netip"
	"slices"
	"strings"

	"github.com/google/nftables"
	"github.com/google/nftables/binaryutil"
	"github.com/google/nftables/expr"
	"golang.org/x/sys/unix"
)

// Names of the wall's nftables objects inside the run's network namespace.
const (
	tableName     = "postern"
	natChainName  = "nat_output"
	filtChainName = "filter_output"
	portsSetName  = "policy_ports"
)

// The run's own addresses besides 127.0.0.1 and ::1, on lo: 127.0.0.2 and a
// unique local address spelling "postern". They exist so that programs asking
// getaddrinfo for AI_ADDRCONFIG see both families configured; the rules treat
// them as loopback.
var (
	runAddr4 = netip.MustParseAddr("127.0.0.2")
	runAddr6 = netip.MustParseAddr("fd70:6f73:7465:726e::1")
)

// ErrBadRuleConfig means a RuleConfig cannot be turned into rules.
var ErrBadRuleConfig = errors.New("invalid wall rule configuration")

// RuleConfig is what the wall's nftables rules depend on.
type RuleConfig struct {
	// Ports are the TCP destination ports redirected to the door's transparent
	// listener (any non-loopback address).
	Ports []uint16
	// AllTCP redirects TCP to every port to the door's transparent listener,
	// Ports or not.
	AllTCP bool
	// TransparentPort and DNSPort are the ports of the door's listeners inside
	// the run's namespace (on loopback, where redirect sends packets).
	TransparentPort uint16
	DNSPort         uint16
	// LogGroup, when not 0, is the nflog group the refused packets are logged
	// to (at most wallLogRate a second) before they are refused.
	LogGroup uint16
}

// ruleset is the wall's whole nftables table as data: built once, rendered as
// text for review and applied to the kernel in one transaction.
type ruleset struct {
	table  *nftables.Table
	ports  []uint16 // sorted, unique; the contents of portsSet when it is used
	set    *nftables.Set
	chains []chainPlan
}

type chainPlan struct {
	chain *nftables.Chain
	rules []rulePlan
}

type rulePlan struct {
	text  string // the rule in nft's own syntax, for people
	exprs []expr.Any
}

// Rules renders the wall's nftables table for c as text: each rule in nft
// syntax followed by the exact expressions sent to the kernel.
func Rules(c RuleConfig) ([]byte, error) {
	rs, err := buildRuleset(c)
	if err != nil {
		return nil, err
	}
	return rs.render(), nil
}

func normalisePorts(in []uint16) ([]uint16, error) {
	out := slices.Clone(in)
	slices.Sort(out)
	out = slices.Compact(out)
	if len(out) > 0 && out[0] == 0 {
		return nil, fmt.Errorf("%w: port 0 in ports %v (ports are 1-65535)", ErrBadRuleConfig, in)
	}
	return out, nil
}

func buildRuleset(c RuleConfig) (*ruleset, error) {
	if c.TransparentPort == 0 || c.DNSPort == 0 {
		return nil, fmt.Errorf("%w: transparent port %d and DNS port %d must both be set", ErrBadRuleConfig, c.TransparentPort, c.DNSPort)
	}
	ports, err := normalisePorts(c.Ports)
	if err != nil {
		return nil, err
	}
	rs := &ruleset{
		table: &nftables.Table{Family: nftables.TableFamilyINet, Name: tableName},
		ports: ports,
	}
	accept := nftables.ChainPolicyAccept
	drop := nftables.ChainPolicyDrop
	nat := &nftables.Chain{
		Name:     natChainName,
		Table:    rs.table,
		Type:     nftables.ChainTypeNAT,
		Hooknum:  nftables.ChainHookOutput,
		Priority: nftables.ChainPriorityNATDest,
		Policy:   &accept,
	}
	filt := &nftables.Chain{
		Name:     filtChainName,
		Table:    rs.table,
		Type:     nftables.ChainTypeFilter,
		Hooknum:  nftables.ChainHookOutput,
		Priority: nftables.ChainPriorityFilter,
		Policy:   &drop,
	}

	// nat: DNS first (any address, 127.0.0.53 included), then loopback is left
	// alone, then the policy's TCP ports go to the door.
	natRules := []rulePlan{
		{
			text:  fmt.Sprintf("udp dport 53 redirect to :%d", c.DNSPort),
			exprs: concat(l4proto(unix.IPPROTO_UDP), dport(53), redirectTo(c.DNSPort)),
		},
		{
			text:  fmt.Sprintf("tcp dport 53 redirect to :%d", c.DNSPort),
			exprs: concat(l4proto(unix.IPPROTO_TCP), dport(53), redirectTo(c.DNSPort)),
		},
		{
			text:  "ip daddr 127.0.0.0/8 return",
			exprs: concat(ip4Daddr(netip.MustParsePrefix("127.0.0.0/8")), verdict(expr.VerdictReturn)),
		},
		{
			text:  "ip6 daddr ::1 return",
			exprs: concat(ip6Daddr(netip.MustParsePrefix("::1/128")), verdict(expr.VerdictReturn)),
		},
		{
			text:  fmt.Sprintf("ip6 daddr %s return", runAddr6),
			exprs: concat(ip6Daddr(netip.PrefixFrom(runAddr6, 128)), verdict(expr.VerdictReturn)),
		},
	}
	switch {
	case c.AllTCP:
		natRules = append(natRules, rulePlan{
			text:  fmt.Sprintf("meta l4proto tcp redirect to :%d", c.TransparentPort),
			exprs: concat(l4proto(unix.IPPROTO_TCP), redirectTo(c.TransparentPort)),
		})
	case len(ports) == 0:
		// No policy ports: every TCP connection but DNS is refused below.
	case len(ports) == 1:
		natRules = append(natRules, rulePlan{
			text:  fmt.Sprintf("tcp dport %d redirect to :%d", ports[0], c.TransparentPort),
			exprs: concat(l4proto(unix.IPPROTO_TCP), dport(ports[0]), redirectTo(c.TransparentPort)),
		})
	default:
		rs.set = &nftables.Set{
			Table:    rs.table,
			Name:     portsSetName,
			Constant: true,
			KeyType:  nftables.TypeInetService,
		}
		natRules = append(natRules, rulePlan{
			text: fmt.Sprintf("tcp dport @%s redirect to :%d", portsSetName, c.TransparentPort),
			exprs: concat(l4proto(unix.IPPROTO_TCP),
				[]expr.Any{
					&expr.Payload{DestRegister: 1, Base: expr.PayloadBaseTransportHeader, Offset: 2, Len: 2},
					&expr.Lookup{SourceRegister: 1, SetName: portsSetName},
				},
				redirectTo(c.TransparentPort)),
		})
	}

	// filter: after nat, redirected packets are addressed to loopback and
	// accepted; everything else is refused or dropped.
	filtRules := []rulePlan{
		{
			text:  "ip daddr 127.0.0.0/8 accept",
			exprs: concat(ip4Daddr(netip.MustParsePrefix("127.0.0.0/8")), verdict(expr.VerdictAccept)),
		},
		{
			text:  "ip6 daddr ::1 accept",
			exprs: concat(ip6Daddr(netip.MustParsePrefix("::1/128")), verdict(expr.VerdictAccept)),
		},
		{
			text:  fmt.Sprintf("ip6 daddr %s accept", runAddr6),
			exprs: concat(ip6Daddr(netip.PrefixFrom(runAddr6, 128)), verdict(expr.VerdictAccept)),
		},
	}
	if c.LogGroup != 0 {
		filtRules = append(filtRules, rulePlan{
			text: fmt.Sprintf("limit rate %d/second burst %d packets log group %d snaplen %d", wallLogRate, 2*wallLogRate, c.LogGroup, wallLogSnaplen),
			exprs: []expr.Any{
				&expr.Limit{Type: expr.LimitTypePkts, Rate: wallLogRate, Unit: expr.LimitTimeSecond, Burst: 2 * wallLogRate},
				&expr.Log{Key: 1<<unix.NFTA_LOG_GROUP | 1<<unix.NFTA_LOG_SNAPLEN, Group: c.LogGroup, Snaplen: wallLogSnaplen},
			},
		})
	}
	filtRules = append(filtRules, []rulePlan{
		{
			text:  "meta l4proto tcp reject with tcp reset",
			exprs: concat(l4proto(unix.IPPROTO_TCP), []expr.Any{&expr.Reject{Type: unix.NFT_REJECT_TCP_RST}}),
		},
		{
			text: "meta l4proto udp reject with icmpx port-unreachable",
			exprs: concat(l4proto(unix.IPPROTO_UDP), []expr.Any{
				&expr.Reject{Type: unix.NFT_REJECT_ICMPX_UNREACH, Code: unix.NFT_REJECT_ICMPX_PORT_UNREACH},
			}),
		},
	}...)
	rs.chains = []chainPlan{{chain: nat, rules: natRules}, {chain: filt, rules: filtRules}}
	return rs, nil
}

func concat(parts ...[]expr.Any) []expr.Any {
	var out []expr.Any
	for _, p := range parts {
		out = append(out, p...)
	}
	return out
}

func l4proto(proto byte) []expr.Any {
	return []expr.Any{
		&expr.Meta{Key: expr.MetaKeyL4PROTO, Register: 1},
		&expr.Cmp{Op: expr.CmpOpEq, Register: 1, Data: []byte{proto}},
	}
}

func dport(port uint16) []expr.Any {
	return []expr.Any{
		&expr.Payload{DestRegister: 1, Base: expr.PayloadBaseTransportHeader, Offset: 2, Len: 2},
		&expr.Cmp{Op: expr.CmpOpEq, Register: 1, Data: binaryutil.BigEndian.PutUint16(port)},
	}
}

func redirectTo(port uint16) []expr.Any {
	return []expr.Any{
		&expr.Immediate{Register: 1, Data: binaryutil.BigEndian.PutUint16(port)},
		&expr.Redir{RegisterProtoMin: 1},
	}
}

func verdict(k expr.VerdictKind) []expr.Any {
	return []expr.Any{&expr.Verdict{Kind: k}}
}

func daddr(nfproto byte, offset uint32, p netip.Prefix) []expr.Any {
	addr := p.Addr().AsSlice()
	n := uint32(len(addr))
	out := []expr.Any{
		&expr.Meta{Key: expr.MetaKeyNFPROTO, Register: 1},
		&expr.Cmp{Op: expr.CmpOpEq, Register: 1, Data: []byte{nfproto}},
		&expr.Payload{DestRegister: 1, Base: expr.PayloadBaseNetworkHeader, Offset: offset, Len: n},
	}
	if p.Bits() < p.Addr().BitLen() {
		mask := make([]byte, n)
		for i := 0; i < p.Bits(); i++ {
			mask[i/8] |= 0x80 >> (i % 8)
		}
		out = append(out, &expr.Bitwise{SourceRegister: 1, DestRegister: 1, Len: n, Mask: mask, Xor: make([]byte, n)})
	}
	return append(out, &expr.Cmp{Op: expr.CmpOpEq, Register: 1, Data: p.Masked().Addr().AsSlice()})
}

func ip4Daddr(p netip.Prefix) []expr.Any { return daddr(unix.NFPROTO_IPV4, 16, p) }
func ip6Daddr(p netip.Prefix) []expr.Any { return daddr(unix.NFPROTO_IPV6, 24, p) }

// nftConn is the part of *nftables.Conn the wall uses.
type nftConn interface {
	AddTable(*nftables.Table) *nftables.Table
	AddChain(*nftables.Chain) *nftables.Chain
	AddSet(*nftables.Set, []nftables.SetElement) error
	AddRule(*nftables.Rule) *nftables.Rule
	Flush() error
}

// apply queues the whole table on conn and commits it as one transaction.
func (rs *ruleset) apply(conn nftConn) error {
	conn.AddTable(rs.table)
	if rs.set != nil {
		elems := make([]nftables.SetElement, 0, len(rs.ports))
		for _, p := range rs.ports {
			elems = append(elems, nftables.SetElement{Key: binaryutil.BigEndian.PutUint16(p)})
		}
		if err := conn.AddSet(rs.set, elems); err != nil {
			return fmt.Errorf("add set %s: %w", portsSetName, err)
		}
	}
	for _, cp := range rs.chains {
		conn.AddChain(cp.chain)
		for _, r := range cp.rules {
			exprs := slices.Clone(r.exprs)
			for i, e := range exprs {
				if l, ok := e.(*expr.Lookup); ok && rs.set != nil {
					c := *l
					c.SetID = rs.set.ID
					exprs[i] = &c
				}
			}
			conn.AddRule(&nftables.Rule{Table: rs.table, Chain: cp.chain, Exprs: exprs})
		}
	}
	if err := conn.Flush(); err != nil {
		return fmt.Errorf("commit nftables table %s: %w", tableName, err)
	}
	return nil
}

func (rs *ruleset) render() []byte {
	var b bytes.Buffer
	fmt.Fprintf(&b, "table inet %s {\n", rs.table.Name)
	if rs.set != nil {
		ps := make([]string, len(rs.ports))
		for i, p := range rs.ports {
			ps[i] = fmt.Sprint(p)
		}
		fmt.Fprintf(&b, "\tset %s {\n\t\ttype inet_service\n\t\tflags constant\n\t\telements = { %s }\n\t}\n", portsSetName, strings.Join(ps, ", "))
	}
	for _, cp := range rs.chains {
		c := cp.chain
		policy := "accept"
		if c.Policy != nil && *c.Policy == nftables.ChainPolicyDrop {
			policy = "drop"
		}
		hook := "?"
		if c.Hooknum != nil && *c.Hooknum == *nftables.ChainHookOutput {
			hook = "output"
		}
		fmt.Fprintf(&b, "\tchain %s {\n\t\ttype %s hook %s priority %d; policy %s;\n", c.Name, c.Type, hook, *c.Priority, policy)
		for _, r := range cp.rules {
			fmt.Fprintf(&b, "\t\t%s\n", r.text)
			for _, e := range r.exprs {
				fmt.Fprintf(&b, "\t\t\t# %s\n", describeExpr(e))
			}
		}
		b.WriteString("\t}\n")
	}
	b.WriteString("}\n")
	return b.Bytes()
}

// describeExpr prints one expression the way `nft --debug=netlink` does.
func describeExpr(e expr.Any) string {
	switch e := e.(type) {
	case *expr.Meta:
		key := map[expr.MetaKey]string{expr.MetaKeyL4PROTO: "l4proto", expr.MetaKeyNFPROTO: "nfproto"}[e.Key]
		return fmt.Sprintf("[ meta load %s => reg %d ]", key, e.Register)
	case *expr.Cmp:
		op := map[expr.CmpOp]string{expr.CmpOpEq: "eq", expr.CmpOpNeq: "neq"}[e.Op]
		return fmt.Sprintf("[ cmp %s reg %d 0x%x ]", op, e.Register, e.Data)
	case *expr.Payload:
		base := map[expr.PayloadBase]string{expr.PayloadBaseNetworkHeader: "network", expr.PayloadBaseTransportHeader: "transport"}[e.Base]
		return fmt.Sprintf("[ payload load %db @ %s header + %d => reg %d ]", e.Len, base, e.Offset, e.DestRegister)
	case *expr.Bitwise:
		return fmt.Sprintf("[ bitwise reg %d = ( reg %d & 0x%x ) ^ 0x%x ]", e.DestRegister, e.SourceRegister, e.Mask, e.Xor)
	case *expr.Lookup:
		return fmt.Sprintf("[ lookup reg %d set %s ]", e.SourceRegister, e.SetName)
	case *expr.Immediate:
		return fmt.Sprintf("[ immediate reg %d 0x%x ]", e.Register, e.Data)
	case *expr.Redir:
		return fmt.Sprintf("[ redir proto_min reg %d ]", e.RegisterProtoMin)
	case *expr.Reject:
		return fmt.Sprintf("[ reject type %d code %d ]", e.Type, e.Code)
	case *expr.Limit:
		return fmt.Sprintf("[ limit rate %d/second burst %d type packets flags 0x0 ]", e.Rate, e.Burst)
	case *expr.Log:
		return fmt.Sprintf("[ log group %d snaplen %d qthreshold 0 ]", e.Group, e.Snaplen)
	case *expr.Verdict:
		v := map[expr.VerdictKind]string{expr.VerdictAccept: "accept", expr.VerdictDrop: "drop", expr.VerdictReturn: "return"}[e.Kind]
		return fmt.Sprintf("[ immediate reg 0 %s ]", v)
	default:
		return fmt.Sprintf("[ %T ]", e)
	}
}

// RunAddrs are the run's own addresses inside the wall besides 127.0.0.1 and ::1.
// The door floors them as its own: they name nothing outside the run.
func RunAddrs() []netip.Addr { return []netip.Addr{runAddr4, runAddr6} }
