// Package bench measures gotp's inbox against River on the job-queue workloads Q1–Q3
// (docs/bench/workloads.md), on SQLite and Postgres, in the same run. It is its own
// module so that River never enters gotp's main module. See RESULTS-inbox.md for the
// figures and the command that reproduces them.
package bench
