package gateway

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"slices"
	"strings"

	"github.com/postern-dev/postern/door/policy"
)

// PolicyPatch is a change to a client's policy: each list is applied as a
// set (adding what is there, or removing what is not, changes nothing);
// Mode and Ports, when given, replace what was there.
type PolicyPatch struct {
	Mode        *string  `json:"mode,omitempty"`
	AddAllow    []string `json:"add_allow,omitempty"`
	RemoveAllow []string `json:"remove_allow,omitempty"`
	AddDeny     []string `json:"add_deny,omitempty"`
	RemoveDeny  []string `json:"remove_deny,omitempty"`
	AddCIDRs    []string `json:"add_cidrs,omitempty"`
	RemoveCIDRs []string `json:"remove_cidrs,omitempty"`
	Ports       []uint16 `json:"ports,omitempty"`
}

// patchFields are the fields a patch may have, for the error that names an
// unknown one.
var patchFields = []string{"mode", "add_allow", "remove_allow", "add_deny", "remove_deny", "add_cidrs", "remove_cidrs", "ports"}

// specFields are those of a whole policy (PUT).
var specFields = []string{"name", "mode", "ports", "allow", "deny", "allow_cidrs"}

// BadRequestError is a request body that cannot be read; it says what to
// send instead.
type BadRequestError struct{ Msg string }

func (e *BadRequestError) Error() string { return e.Msg }

// maxBody bounds a request body of the API.
const maxBody = 1 << 20

// ParsePolicyPatch reads a patch from JSON: one object with only the fields
// of PolicyPatch, each of its type; anything else is a *BadRequestError
// naming the field and the fix.
func ParsePolicyPatch(data []byte) (PolicyPatch, error) {
	var raw map[string]json.RawMessage
	if err := decodeStrict(data, &raw); err != nil {
		return PolicyPatch{}, badJSON(err, `{"add_allow": ["github.com"]}`)
	}
	var p PolicyPatch
	for k, v := range raw {
		var err error
		switch k {
		case "mode":
			var s string
			err = decodeStrict(v, &s)
			p.Mode = &s
		case "add_allow":
			p.AddAllow, err = stringList(v)
		case "remove_allow":
			p.RemoveAllow, err = stringList(v)
		case "add_deny":
			p.AddDeny, err = stringList(v)
		case "remove_deny":
			p.RemoveDeny, err = stringList(v)
		case "add_cidrs":
			p.AddCIDRs, err = stringList(v)
		case "remove_cidrs":
			p.RemoveCIDRs, err = stringList(v)
		case "ports":
			p.Ports, err = portList(v)
		default:
			return PolicyPatch{}, &BadRequestError{fmt.Sprintf("unknown field %q; a policy patch has only %s", k, strings.Join(patchFields, ", "))}
		}
		if err != nil {
			return PolicyPatch{}, &BadRequestError{fmt.Sprintf("field %q: %v", k, err)}
		}
	}
	return p, nil
}

// ParsePolicySpec reads a whole policy from JSON, as PUT sends it.
func ParsePolicySpec(data []byte) (policy.Spec, error) {
	var raw map[string]json.RawMessage
	if err := decodeStrict(data, &raw); err != nil {
		return policy.Spec{}, badJSON(err, `{"mode": "enforce", "ports": [80, 443], "allow": ["github.com"], "deny": [], "allow_cidrs": []}`)
	}
	var s policy.Spec
	for k, v := range raw {
		var err error
		switch k {
		case "name":
			err = decodeStrict(v, &s.Name)
		case "mode":
			err = decodeStrict(v, &s.Mode)
		case "ports":
			s.Ports, err = portList(v)
		case "allow":
			s.Allow, err = stringList(v)
		case "deny":
			s.Deny, err = stringList(v)
		case "allow_cidrs":
			s.AllowCIDRs, err = stringList(v)
		default:
			return policy.Spec{}, &BadRequestError{fmt.Sprintf("unknown field %q; a policy has only %s", k, strings.Join(specFields, ", "))}
		}
		if err != nil {
			return policy.Spec{}, &BadRequestError{fmt.Sprintf("field %q: %v", k, err)}
		}
	}
	return s, nil
}

func badJSON(err error, example string) error {
	return &BadRequestError{fmt.Sprintf("the body is not one JSON object (%v); send for example %s", err, example)}
}

// decodeStrict decodes exactly one JSON value.
func decodeStrict(data []byte, v any) error {
	dec := json.NewDecoder(bytes.NewReader(data))
	if err := dec.Decode(v); err != nil {
		return err
	}
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		return errors.New("more than one JSON value")
	}
	return nil
}

func stringList(v json.RawMessage) ([]string, error) {
	var out []string
	if err := decodeStrict(v, &out); err != nil || out == nil {
		return nil, errors.New(`write a list of strings, as in ["github.com"]`)
	}
	return out, nil
}

func portList(v json.RawMessage) ([]uint16, error) {
	var nums []json.Number
	dec := json.NewDecoder(bytes.NewReader(v))
	dec.UseNumber()
	if err := dec.Decode(&nums); err != nil || nums == nil {
		return nil, errors.New("write a list of port numbers, as in [80, 443]")
	}
	out := make([]uint16, 0, len(nums))
	for _, n := range nums {
		i, err := n.Int64()
		if err != nil || i < 1 || i > 65535 {
			return nil, fmt.Errorf("%s is not a port: a port is a whole number from 1 to 65535, as in [80, 443]", n)
		}
		out = append(out, uint16(i))
	}
	return out, nil
}

// Apply returns base changed by p. base is not changed.
func (p PolicyPatch) Apply(base policy.Spec) policy.Spec {
	s := policy.Spec{
		Name:       base.Name,
		Mode:       base.Mode,
		Ports:      slices.Clone(base.Ports),
		Allow:      setChange(base.Allow, p.AddAllow, p.RemoveAllow),
		Deny:       setChange(base.Deny, p.AddDeny, p.RemoveDeny),
		AllowCIDRs: setChange(base.AllowCIDRs, p.AddCIDRs, p.RemoveCIDRs),
	}
	if p.Mode != nil {
		s.Mode = *p.Mode
	}
	if p.Ports != nil {
		s.Ports = slices.Clone(p.Ports)
	}
	return s
}

// setChange is list with add appended (what is not there yet) and remove
// taken out, in list's order.
func setChange(list, add, remove []string) []string {
	out := make([]string, 0, len(list)+len(add))
	for _, s := range list {
		if !slices.Contains(remove, s) && !slices.Contains(out, s) {
			out = append(out, s)
		}
	}
	for _, s := range add {
		if !slices.Contains(remove, s) && !slices.Contains(out, s) {
			out = append(out, s)
		}
	}
	return out
}
