// Package tpcc is a TPC-C workload for Ordo (TPC Benchmark C, revision 5.11,
// clauses 1–5, the parts that shape the load): the nine tables, a loader
// that writes them through whatever server it is given (an Ordo node, or
// PostgreSQL directly for the baseline), the five transaction types with
// the specification's mix and inputs (remote customers and supply
// warehouses, New-Order's 1 % rollbacks), clients homed on one server
// each, retries of serialization failures and deadlocks counted per
// transaction type, and the checks of the consistency conditions 1–4.
//
// Files:
//   - schema.go: the tables and the sizes (Scale: the specification's, or
//     scaled down for short runs);
//   - rand.go: NURand, last names, random strings (clause 4.3);
//   - load.go: the initial population (clause 4.3.3), through COPY;
//   - txns.go: the five transactions (clauses 2.4–2.8);
//   - classes.go: the conflict classes each transaction declares under
//     cons, at table or warehouse grain (paper 003, Table 1);
//   - driver.go: clients, the mix, retries, measurements and the report;
//   - check.go: consistency conditions 1–4 (clause 3.3.2).
//
// Keying and think times are off by default (clause 5.2.5 asks for them;
// Correia et al. and every replication paper measure without them). The
// package only talks SQL through pgx: it must never reach into an Ordo
// node, so the same code measures PostgreSQL directly and the cluster.
package tpcc
