package ctl

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/ordo-db/ordo/internal/admin"
	"github.com/ordo-db/ordo/internal/certs"
	"github.com/ordo-db/ordo/internal/version"
)

// Exit codes of ordoctl.
const (
	ExitOK          = 0
	ExitFailed      = 1 // a check failed, or a node could not do what was asked
	ExitUsage       = 2 // unknown command or flag, conflicting or unreadable options
	ExitUnreachable = 3 // a node could not be reached or refused the credentials
)

// errCheckFailed is wrapped by errors of checks that failed (exit 1).
var errCheckFailed = errors.New("check failed")

// usageError is an error in how ordoctl was called (exit 2).
type usageError struct{ err error }

func (u usageError) Error() string { return u.err.Error() }
func (u usageError) Unwrap() error { return u.err }

func usagef(format string, args ...any) error { return usageError{fmt.Errorf(format, args...)} }

// Main runs ordoctl with args (without the program name) and returns its
// exit code.
func Main(args []string, stdout, stderr io.Writer) int {
	root := newRoot()
	root.SetArgs(args)
	root.SetOut(stdout)
	root.SetErr(stderr)
	err := root.Execute()
	if err == nil {
		return ExitOK
	}
	fmt.Fprintln(stderr, "ordoctl:", err)
	code := exitCode(err)
	if code == ExitUsage {
		fmt.Fprintln(stderr, "Run 'ordoctl --help' for usage.")
	}
	return code
}

func exitCode(err error) int {
	var u usageError
	switch {
	case err == nil:
		return ExitOK
	case errors.As(err, &u):
		return ExitUsage
	case errors.Is(err, admin.ErrUnreachable), errors.Is(err, admin.ErrUnauthenticated):
		return ExitUnreachable
	}
	return ExitFailed
}

// globals are the flags every command takes.
type globals struct {
	endpoints         []string
	dataDirs          []string
	token, tokenFile  string
	cert, key, cacert string
	output            string
	requestTimeout    time.Duration
}

func newRoot() *cobra.Command {
	g := &globals{}
	root := &cobra.Command{
		Use:   "ordoctl",
		Short: "Administer an Ordo cluster through its nodes' admin APIs",
		Long: `ordoctl speaks to the admin API every Ordo node serves on its admin_listen
address (docs/admin.md). Name the nodes with --endpoints (their admin
addresses), or, on a node's machine, with --data-dir (its data directory,
where it records its admin address and, on loopback, its generated token).
Authenticate with the node's token (--token-file) or, when the cluster uses
peer TLS, with a client certificate of its CA (--cert, --key, --cacert;
made with 'ordo cert create-client').

Exit codes: 0 ok; 1 a check failed or a node could not do what was asked;
2 usage error; 3 a node could not be reached or refused the credentials.`,
		SilenceUsage:  true,
		SilenceErrors: true,
		Args:          cobra.ArbitraryArgs,
		RunE:          groupRunE,
	}
	pf := root.PersistentFlags()
	pf.StringSliceVar(&g.endpoints, "endpoints", nil, "admin addresses (host:port) of one or more nodes, comma-separated")
	pf.StringArrayVar(&g.dataDirs, "data-dir", nil, "data directory of a node on this machine (repeat for several): its admin address (admin.addr) and, without other credentials, its token (admin.token)")
	pf.StringVar(&g.token, "token", "", "the nodes' admin token (visible to other local users in the process list: prefer --token-file)")
	pf.StringVar(&g.tokenFile, "token-file", "", "file holding the admin token (a node on loopback generates DATA_DIR/admin.token)")
	pf.StringVar(&g.cert, "cert", "", "client certificate (clusters with peer TLS; ordo cert create-client)")
	pf.StringVar(&g.key, "key", "", "the client certificate's key")
	pf.StringVar(&g.cacert, "cacert", "", "the cluster's CA certificate, to verify the nodes")
	pf.StringVarP(&g.output, "output", "o", "table", "output format: table, json or yaml")
	pf.DurationVar(&g.requestTimeout, "request-timeout", 10*time.Second, "bound on each request to a node")
	_ = root.RegisterFlagCompletionFunc("output", cobra.FixedCompletions([]string{"table", "json", "yaml"}, cobra.ShellCompDirectiveNoFileComp))
	for _, f := range []string{"token-file", "cert", "key", "cacert"} {
		_ = root.MarkPersistentFlagFilename(f)
	}
	_ = root.MarkPersistentFlagDirname("data-dir")
	root.SetFlagErrorFunc(func(_ *cobra.Command, err error) error { return usageError{err} })

	root.AddCommand(&cobra.Command{
		Use:   "version",
		Short: "Print the version of ordoctl",
		Args:  noArgs,
		Run: func(cmd *cobra.Command, _ []string) {
			fmt.Fprintln(cmd.OutOrStdout(), "ordoctl", version.String())
		},
	})
	root.AddCommand(statusCmd(g), protocolCmd(g), schemaCheckCmd(g), dataCheckCmd(g), txnStatusCmd(g), classesCmd(g), profilesCmd(g), memberCmd(g), drainCmd(g))
	return root
}

// groupRunE is the RunE of a command that only groups others: without
// arguments it prints its help; an argument is an unknown command.
func groupRunE(cmd *cobra.Command, args []string) error {
	if len(args) == 0 {
		return cmd.Help()
	}
	msg := fmt.Sprintf("unknown command %q for %q", args[0], cmd.CommandPath())
	if s := cmd.SuggestionsFor(args[0]); len(s) > 0 {
		msg += "; did you mean " + strings.Join(s, " or ") + "?"
	}
	return usagef("%s", msg)
}

// noArgs is cobra.NoArgs as a usage error.
func noArgs(cmd *cobra.Command, args []string) error {
	if err := cobra.NoArgs(cmd, args); err != nil {
		return usageError{err}
	}
	return nil
}

func (g *globals) validate() error {
	switch g.output {
	case "table", "json", "yaml":
	default:
		return usagef("--output %q: use table, json or yaml", g.output)
	}
	g.endpoints, g.dataDirs = nonEmpty(g.endpoints), nonEmpty(g.dataDirs)
	if len(g.endpoints)+len(g.dataDirs) == 0 {
		return usagef("name the nodes: --endpoints (admin addresses) or --data-dir (a node's data directory on this machine)")
	}
	if g.token != "" && g.tokenFile != "" {
		return usagef("--token and --token-file: give one")
	}
	tlsSet := g.cert != "" || g.key != "" || g.cacert != ""
	if tlsSet && (g.token != "" || g.tokenFile != "") {
		return usagef("a token and --cert/--key/--cacert: a node takes one or the other (client certificates when it has peer TLS)")
	}
	if (g.cert == "") != (g.key == "") {
		return usagef("--cert and --key go together")
	}
	if g.cert != "" && g.cacert == "" {
		return usagef("--cert needs --cacert (the cluster's CA, to verify the nodes)")
	}
	return nil
}

func nonEmpty(in []string) []string {
	var out []string
	for _, s := range in {
		if s = strings.TrimSpace(s); s != "" {
			out = append(out, s)
		}
	}
	return out
}

// clients checks the global flags and returns a client per endpoint, then
// one per data directory.
func (g *globals) clients() ([]*admin.Client, error) {
	if err := g.validate(); err != nil {
		return nil, err
	}
	o := admin.ClientOptions{Token: g.token, Timeout: g.requestTimeout}
	if g.tokenFile != "" {
		tok, err := readToken(g.tokenFile)
		if err != nil {
			return nil, usagef("--token-file: %v", err)
		}
		o.Token = tok
	}
	if g.cacert != "" {
		cfg, err := certs.AdminClientConfig(g.cert, g.key, g.cacert)
		if err != nil {
			return nil, usagef("--cert/--key/--cacert: %v", err)
		}
		o.TLS = cfg
	}
	var cs []*admin.Client
	for _, e := range g.endpoints {
		cs = append(cs, admin.NewClient(e, o))
	}
	for _, dir := range g.dataDirs {
		addr, err := admin.ReadAddrFile(dir)
		if err != nil {
			closeAll(cs)
			return nil, fmt.Errorf("%w: --data-dir %s: no admin address (is the node running?): %v", admin.ErrUnreachable, dir, err)
		}
		do := o
		if o.Token == "" && o.TLS == nil {
			// the node's generated token, if it has one
			if tok, err := readToken(filepath.Join(dir, admin.TokenFileName)); err == nil {
				do.Token = tok
			} else if !errors.Is(err, fs.ErrNotExist) {
				closeAll(cs)
				return nil, usagef("--data-dir %s: %v", dir, err)
			}
		}
		cs = append(cs, admin.NewClient(addr, do))
	}
	return cs, nil
}

func readToken(path string) (string, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return "", err
	}
	tok := strings.TrimSpace(string(b))
	if tok == "" {
		return "", fmt.Errorf("%s is empty", path)
	}
	return tok, nil
}

// each calls f for every client concurrently and returns the results in
// endpoint order.
func each[T any](ctx context.Context, cs []*admin.Client, f func(context.Context, *admin.Client) (T, error)) ([]T, []error) {
	out, errs := make([]T, len(cs)), make([]error, len(cs))
	done := make(chan struct{}, len(cs))
	for i, c := range cs {
		go func() {
			defer func() { done <- struct{}{} }()
			out[i], errs[i] = f(ctx, c)
		}()
	}
	for range cs {
		<-done
	}
	return out, errs
}

func closeAll(cs []*admin.Client) {
	for _, c := range cs {
		c.Close()
	}
}
