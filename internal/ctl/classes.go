package ctl

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"reflect"
	"slices"
	"strings"

	"github.com/spf13/cobra"
	"gopkg.in/yaml.v3"

	"github.com/ordo-db/ordo/internal/admin"
)

// A class file (classes apply -f, profiles apply -f) is YAML:
//
//	classes:
//	  - name: district
//	    tables: [public.district]
//	    label: w
//	    columns: {public.district: d_w_id}
//	profiles:
//	  - name: payment
//	    classes: "warehouse[w={w}], district[w={w}], customer[w={w}]"
//	catch_all: "district, customer"   # what a transaction that declares none takes ("*" by default)
//
// docs/admin.md has TPC-C's complete example.

// classesFile reads a class file ("-" for standard input).
func classesFile(path string, stdin io.Reader) (admin.ClassesChange, error) {
	var ch admin.ClassesChange
	var b []byte
	var err error
	if path == "-" {
		b, err = io.ReadAll(stdin)
	} else {
		b, err = os.ReadFile(path)
	}
	if err != nil {
		return ch, usagef("-f: %v", err)
	}
	dec := yaml.NewDecoder(strings.NewReader(string(b)))
	dec.KnownFields(true)
	if err := dec.Decode(&ch); err != nil && !errors.Is(err, io.EOF) {
		return ch, usagef("-f %s: %v", path, err)
	}
	return ch, nil
}

// classesOutput is what `ordoctl classes list` and `profiles list` print
// with -o json|yaml: each node's configuration.
type classesOutput struct {
	Nodes []nodeClasses `json:"nodes"`
}

type nodeClasses struct {
	Endpoint string         `json:"endpoint"`
	Classes  *admin.Classes `json:"configuration,omitempty"`
	Error    string         `json:"error,omitempty"`
}

func classesCmd(g *globals) *cobra.Command {
	return classLikeCmd(g, "classes", "class")
}

func profilesCmd(g *globals) *cobra.Command {
	return classLikeCmd(g, "profiles", "profile")
}

// classLikeCmd builds `ordoctl classes …` or `ordoctl profiles …`: both
// are the same cluster configuration, changed through the total order.
func classLikeCmd(g *globals, what, one string) *cobra.Command {
	cmd := &cobra.Command{
		Use:   what,
		Short: "The cluster's conflict " + what + " (cluster configuration, changed through the total order)",
		Args:  cobra.ArbitraryArgs,
		RunE:  groupRunE,
	}
	cmd.AddCommand(&cobra.Command{
		Use:   "list",
		Short: "Show the " + what + " in force on every node",
		Long: `list asks every node of --endpoints for the conflict-class configuration in
force (classes, profiles, and the seqno of the change that made it), and
exits 1 if the nodes differ (one that has not yet applied the latest change
differs for a moment).`,
		Args: noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			cs, err := g.clients()
			if err != nil {
				return err
			}
			defer closeAll(cs)
			got, errs := each(cmd.Context(), cs, func(ctx context.Context, c *admin.Client) (admin.Classes, error) {
				return c.Classes(ctx)
			})
			out := classesOutput{Nodes: []nodeClasses{}}
			var problems []error
			var first *admin.Classes
			for i, c := range cs {
				n := nodeClasses{Endpoint: c.Endpoint()}
				if errs[i] != nil {
					n.Error = errs[i].Error()
					problems = append(problems, errs[i])
				} else {
					n.Classes = &got[i]
					if first == nil {
						first = n.Classes
					} else if !sameClasses(first, n.Classes) {
						problems = append(problems, fmt.Errorf("%w: the nodes' %s differ (node %d at seqno %d, node %d at seqno %d)", errCheckFailed, what, first.NodeID, first.Seqno, n.Classes.NodeID, n.Classes.Seqno))
					}
				}
				out.Nodes = append(out.Nodes, n)
			}
			if err := g.render(cmd.OutOrStdout(), out, func(w io.Writer) { classesTable(w, what, out) }); err != nil {
				return err
			}
			return errors.Join(problems...)
		},
	})
	var file string
	apply := &cobra.Command{
		Use:   "apply -f FILE",
		Short: "Create or replace " + what + " from a YAML file",
		Long: `apply reads a class file (YAML: classes and profiles, see docs/admin.md) and
creates or replaces, by name, the ` + what + ` it holds, through one node (the
first of --endpoints that answers): the change goes through the total order,
so every node switches at the same seqno. It waits until that node applied it
and prints the configuration then in force. A change that does not check out
(a class split by a label without a column for one of its tables, a profile
naming an unknown class…) is refused whole and exits 1.`,
		Args: noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if file == "" {
				return usagef("apply needs -f FILE (or -f - for standard input)")
			}
			ch, err := classesFile(file, cmd.InOrStdin())
			if err != nil {
				return err
			}
			if what == "profiles" {
				ch.Classes = nil
			}
			if what == "profiles" {
				ch.CatchAll = ""
			}
			if len(ch.Classes)+len(ch.Profiles) == 0 && ch.CatchAll == "" {
				return usagef("-f %s: no %s in it", file, what)
			}
			return changeClasses(cmd, g, ch)
		},
	}
	apply.Flags().StringVarP(&file, "filename", "f", "", "the class file (YAML; - for standard input)")
	cmd.AddCommand(apply)
	cmd.AddCommand(&cobra.Command{
		Use:   "delete NAME...",
		Short: "Delete " + what + " by name",
		Args:  cobra.MinimumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			ch := admin.ClassesChange{DeleteClasses: args}
			if what == "profiles" {
				ch = admin.ClassesChange{DeleteProfiles: args}
			}
			return changeClasses(cmd, g, ch)
		},
	})
	return cmd
}

// changeClasses sends ch through the first node that answers and prints
// the configuration it then has.
func changeClasses(cmd *cobra.Command, g *globals, ch admin.ClassesChange) error {
	cs, err := g.clients()
	if err != nil {
		return err
	}
	defer closeAll(cs)
	var got admin.Classes
	var c *admin.Client
	c, _, err = startOnFirst(cs, func(c *admin.Client) (uint64, error) {
		got, err = c.ChangeClasses(cmd.Context(), ch)
		return got.Seqno, err
	})
	if err != nil {
		return err
	}
	out := classesOutput{Nodes: []nodeClasses{{Endpoint: c.Endpoint(), Classes: &got}}}
	return g.render(cmd.OutOrStdout(), out, func(w io.Writer) { classesTable(w, "classes", out) })
}

func sameClasses(a, b *admin.Classes) bool {
	return a.Seqno == b.Seqno && reflect.DeepEqual(a.Classes, b.Classes) && reflect.DeepEqual(a.Profiles, b.Profiles) && a.CatchAll == b.CatchAll
}

func classesTable(w io.Writer, what string, out classesOutput) {
	if what == "profiles" {
		fmt.Fprintln(w, "NODE\tSEQNO\tPROFILE\tCLASSES")
	} else {
		fmt.Fprintln(w, "NODE\tSEQNO\tCLASS\tTABLES\tSPLIT")
	}
	for _, n := range out.Nodes {
		c := n.Classes
		if c == nil {
			fmt.Fprintf(w, "-\t-\tunreachable %s: %s\n", n.Endpoint, n.Error)
			continue
		}
		if what == "profiles" {
			for _, p := range c.Profiles {
				fmt.Fprintf(w, "%d\t%d\t%s\t%s\n", c.NodeID, c.Seqno, p.Name, p.Classes)
			}
			if len(c.Profiles) == 0 {
				fmt.Fprintf(w, "%d\t%d\t(none)\t-\n", c.NodeID, c.Seqno)
			}
			continue
		}
		for _, cl := range c.Classes {
			split := "-"
			if cl.Label != "" {
				var cols []string
				for _, t := range cl.Tables {
					cols = append(cols, t+"."+cl.Columns[t])
				}
				slices.Sort(cols)
				split = cl.Label + " by " + strings.Join(cols, ", ")
			}
			fmt.Fprintf(w, "%d\t%d\t%s\t%s\t%s\n", c.NodeID, c.Seqno, cl.Name, strings.Join(cl.Tables, ", "), split)
		}
		if len(c.Classes) == 0 {
			fmt.Fprintf(w, "%d\t%d\t(none: every table is a class of its own)\t-\t-\n", c.NodeID, c.Seqno)
		}
		if c.CatchAll != "" && c.CatchAll != "*" {
			fmt.Fprintf(w, "%d\t%d\t(catch-all: transactions that declare none)\t%s\t-\n", c.NodeID, c.Seqno, c.CatchAll)
		}
	}
}
