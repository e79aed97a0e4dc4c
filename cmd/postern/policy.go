package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"text/tabwriter"

	"github.com/spf13/cobra"

	"github.com/postern-dev/postern/door/policy"
)

// policyCheck is one judged target of `postern policy check`.
type policyCheck struct {
	Target    string `json:"target"`
	Host      string `json:"host"`
	Port      uint16 `json:"port"`
	Decision  string `json:"decision"`
	Reason    string `json:"reason"`
	Rule      string `json:"rule"`
	WouldDeny bool   `json:"would_deny"`
	// Sealed names the guardrail that seals the host ("" when none does).
	Sealed  string `json:"sealed"`
	Suggest string `json:"suggest"`
}

var policyCheckFlags struct {
	policy string
	json   bool
}

var policyCmd = &cobra.Command{
	Use:   "policy",
	Short: "Work with egress policies",
}

var policyCheckCmd = &cobra.Command{
	Use:   "check --policy FILE [--json] TARGET...",
	Short: "Judge targets (host[:port] or IP[:port], default port 443) by a policy, without resolving anything",
	Long: `Judge each TARGET by the policy as the door would before resolving: a name
on its name, an IP literal on its address. Exit status 0 if every target is
allowed, 1 if any is denied, 2 on a bad policy or target. Hosts a guardrail
seals are judged as a run whose seal is held judges them: denied, with the
guardrail named.`,
	Args: cobra.MinimumNArgs(1),
	RunE: func(cmd *cobra.Command, args []string) error {
		if policyCheckFlags.policy == "" {
			return &exitError{code: 2, err: errors.New("--policy is required")}
		}
		pol, err := policy.Load(policyCheckFlags.policy)
		if err != nil {
			return &exitError{code: 2, err: err}
		}
		pol = pol.Sealing()
		checks := make([]policyCheck, 0, len(args))
		for _, t := range args {
			h, port, err := policy.SplitTarget(t, 443)
			if err != nil {
				return &exitError{code: 2, err: fmt.Errorf("target %q: %w (write host[:port] or IP[:port])", t, err)}
			}
			var d policy.Decision
			if h.Addr.IsValid() {
				d = pol.DecideAddr(h.Addr, port, "")
			} else {
				d = pol.DecideName(h.Name, port)
			}
			c := policyCheck{Target: t, Host: h.String(), Port: port, Decision: d.Verdict.String(),
				Reason: d.Reason, Rule: d.Rule, WouldDeny: d.WouldDeny}
			if d.Sealed {
				g, _ := pol.SealedBy(h.Name)
				c.Sealed = g.Name
			} else if d.Verdict != policy.Allow || d.WouldDeny {
				c.Suggest = pol.Suggest(h, port)
			}
			checks = append(checks, c)
		}
		out := cmd.OutOrStdout()
		if policyCheckFlags.json {
			enc := json.NewEncoder(out)
			enc.SetIndent("", "  ")
			if err := enc.Encode(checks); err != nil {
				return err
			}
		} else {
			tw := tabwriter.NewWriter(out, 0, 4, 2, ' ', 0)
			fmt.Fprintln(tw, "TARGET\tDECISION\tREASON\tRULE")
			for _, c := range checks {
				dec := c.Decision
				if c.WouldDeny {
					dec += " (would deny)"
				}
				if c.Sealed != "" {
					dec += " (sealed)"
				}
				rule := c.Rule
				if rule == "" {
					rule = "-"
				}
				fmt.Fprintf(tw, "%s\t%s\t%s\t%s\n", c.Target, dec, c.Reason, rule)
			}
			if err := tw.Flush(); err != nil {
				return err
			}
		}
		for _, c := range checks {
			if c.Decision != policy.Allow.String() {
				return &exitError{code: 1, err: errors.New("")}
			}
		}
		return nil
	},
}

func init() {
	buildCommands = append(buildCommands, func() {
		f := policyCheckCmd.Flags()
		f.StringVar(&policyCheckFlags.policy, "policy", "", "policy file (HCL)")
		f.BoolVar(&policyCheckFlags.json, "json", false, "print a JSON array instead of a table")
		policyCmd.AddCommand(policyCheckCmd)
		rootCmd.AddCommand(policyCmd)
	})
}
