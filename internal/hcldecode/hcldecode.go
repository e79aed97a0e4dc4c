package hcldecode

import (
	"fmt"
	"strconv"
	"strings"

	"github.com/hashicorp/hcl/v2"
	"github.com/zclconf/go-cty/cty"
	"github.com/zclconf/go-cty/cty/convert"
	"github.com/zclconf/go-cty/cty/gocty"
)

// Attr sets *to from attr's value converted to *to's type, as
// gohcl.DecodeExpression does; to is a *string, a *[]string or a
// *map[string]string or *int. A missing attr (nil) leaves *to as it is.
func Attr(attr *hcl.Attribute, to any) hcl.Diagnostics {
	if attr == nil {
		return nil
	}
	val, diags := attr.Expr.Value(nil)
	ty := cty.String
	switch to.(type) {
	case *map[string]string:
		ty = cty.Map(cty.String)
	case *int:
		ty = cty.Number
	case *[]string:
		ty = cty.List(cty.String)
	}
	unsuitable := func(err error) hcl.Diagnostics {
		return append(diags, &hcl.Diagnostic{
			Severity: hcl.DiagError,
			Summary:  "Unsuitable value type",
			Detail:   fmt.Sprintf("Unsuitable value: %s", err.Error()),
			Subject:  attr.Expr.StartRange().Ptr(),
			Context:  attr.Expr.Range().Ptr(),
		})
	}
	val, err := convert.Convert(val, ty)
	if err != nil {
		return unsuitable(err)
	}
	if err := gocty.FromCtyValue(val, to); err != nil {
		return unsuitable(err)
	}
	return diags
}

// Message is diags as one line: each problem as "file:line:col: summary:
// detail", joined by "; ".
func Message(diags hcl.Diagnostics) string {
	var b strings.Builder
	for i, d := range diags {
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

// Pos is where r starts, as "file:line:col".
func Pos(r hcl.Range) string {
	return r.Filename + ":" + strconv.Itoa(r.Start.Line) + ":" + strconv.Itoa(r.Start.Column)
}

// Lines is diags one problem a line, "file:line:col: summary; detail"
// (filename where a problem has no place of its own): how a file that
// cannot be used is reported.
func Lines(filename string, diags hcl.Diagnostics) string {
	var b strings.Builder
	for i, d := range diags {
		if i > 0 {
			b.WriteByte('\n')
		}
		if d.Subject != nil {
			b.WriteString(Pos(*d.Subject))
		} else {
			b.WriteString(filename)
		}
		b.WriteString(": ")
		b.WriteString(d.Summary)
		if d.Detail != "" {
			b.WriteString("; ")
			b.WriteString(d.Detail)
		}
	}
	return b.String()
}
