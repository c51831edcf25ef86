// Command tpcc runs the TPC-C workload (package tpcc) against servers
// given by connection string: PostgreSQL directly, or the nodes of an
// Ordo cluster, one -dsn per node.
//
//	go run ./test/bench/tpcc/cmd -dsn URL1 -dsn URL2 -dsn URL3 -load -warehouses 3 -clients 8 -duration 60s
//
// -load creates the tables and loads them through the first server
// (-small: about 1 % of the specification's rows). -grain table|warehouse
// declares conflict classes (for a cluster running cons, with
// deployments/examples/tpcc-classes.yaml applied). It prints the report
// and, with -check, checks consistency conditions 1–4 on every server.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/ordo-db/ordo/test/bench/tpcc"
)

type dsnList []string

func (d *dsnList) String() string     { return strings.Join(*d, ",") }
func (d *dsnList) Set(s string) error { *d = append(*d, s); return nil }

func main() {
	var dsns dsnList
	flag.Var(&dsns, "dsn", "a server's connection string (repeat: one per node)")
	warehouses := flag.Int("warehouses", 1, "warehouses")
	clients := flag.Int("clients", 1, "clients per server")
	duration := flag.Duration("duration", time.Minute, "length of the run")
	load := flag.Bool("load", false, "create and load the tables first (through the first server)")
	small := flag.Bool("small", false, "load about 1 % of the specification's rows (for short runs)")
	grainF := flag.String("grain", "none", "conflict classes declared under cons: none, table, warehouse")
	check := flag.Bool("check", false, "check consistency conditions 1-4 on every server afterwards")
	keying := flag.Bool("keying-think", false, "keying and think times (clause 5.2.5)")
	flag.Parse()
	if err := run(dsns, *warehouses, *clients, *duration, *load, *small, *grainF, *check, *keying); err != nil {
		fmt.Fprintln(os.Stderr, "tpcc:", err)
		os.Exit(1)
	}
}

func run(dsns []string, warehouses, clients int, duration time.Duration, load, small bool, grainF string, check, keying bool) error {
	ctx := context.Background()
	if len(dsns) == 0 {
		return fmt.Errorf("no -dsn")
	}
	grain, err := tpcc.ParseGrain(grainF)
	if err != nil {
		return err
	}
	scale := tpcc.Spec
	if small {
		scale = tpcc.Small
	}
	if load {
		t0 := time.Now()
		if err := tpcc.Load(ctx, dsns, warehouses, scale, 1); err != nil {
			return err
		}
		fmt.Printf("loaded %d warehouses in %.1f s\n", warehouses, time.Since(t0).Seconds())
	}
	rep, err := tpcc.Run(ctx, tpcc.Config{DSNs: dsns, Warehouses: warehouses, Scale: scale, ClientsPerNode: clients,
		Duration: duration, Grain: grain, KeyingThink: keying, Seed: uint64(time.Now().UnixNano())})
	if err != nil {
		return err
	}
	rep.Print(os.Stdout)
	if check {
		for i, dsn := range dsns {
			conn, err := pgx.Connect(ctx, dsn)
			if err != nil {
				return err
			}
			err = tpcc.Check(ctx, conn)
			conn.Close(ctx)
			if err != nil {
				return fmt.Errorf("server %d: %w", i+1, err)
			}
		}
		fmt.Println("consistency conditions 1-4 hold on every server")
	}
	return nil
}
