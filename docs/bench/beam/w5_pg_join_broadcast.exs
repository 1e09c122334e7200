# W5 on the BEAM: Erlang's pg (OTP 23 and later). 10,000 processes join
# group "g" of one scope, each for itself, all at once; then 100 broadcasts
# (get_members and a send to each) reach every member, and the members
# drain them.
#   elixir w5_pg_join_broadcast.exs
# gotp's side: BenchmarkW5PGJoin, BenchmarkW5PGBroadcast and
# BenchmarkW5PGBroadcastReceiveLoop in package pg.
Code.require_file("anchor.exs", __DIR__)

defmodule W5 do
  def member(me, scope, group, per_round) do
    receive do: (:join -> :ok)
    :ok = :pg.join(scope, group, self())
    send(me, :joined)
    take(me, per_round, per_round)
  end

  defp take(me, 0, per_round), do: (send(me, :drained); take(me, per_round, per_round))

  defp take(me, left, per_round) do
    receive do
      {:msg, _} -> take(me, left - 1, per_round)
      :stop -> :ok
    end
  end

  def send_each([], _msg), do: :ok
  def send_each([pid | rest], msg), do: (send(pid, msg); send_each(rest, msg))

  def broadcast(_scope, _group, 0), do: :ok

  def broadcast(scope, group, n) do
    send_each(:pg.get_members(scope, group), {:msg, n})
    broadcast(scope, group, n - 1)
  end

  def wait(0, _tag), do: :ok
  def wait(n, tag), do: receive(do: (^tag -> wait(n - 1, tag)))
end

GotpBench.describe("w5_pg_join_broadcast")
members = GotpBench.size(10_000)
rounds = 100
{:ok, scope_pid} = :pg.start_link(:w5)
me = self()
pids = for _ <- 1..members, do: spawn(W5, :member, [me, :w5, "g", rounds])
GotpBench.pause()
ets0 = :erlang.memory(:ets)
{:memory, scope0} = Process.info(scope_pid, :memory)

t0 = GotpBench.clock()
for p <- pids, do: send(p, :join)
W5.wait(members, :joined)
elapsed = GotpBench.clock() - t0
^members = length(:pg.get_members(:w5, "g"))
:erlang.garbage_collect(scope_pid)
{:memory, scope1} = Process.info(scope_pid, :memory)
GotpBench.line("W5_pg_join", members, elapsed, GotpBench.bytes_each(:erlang.memory(:ets) - ets0, members, "member"),
  members: members, scope_bytes_per_member: (scope1 - scope0) / members)

GotpBench.pause()
t0 = GotpBench.clock()
W5.broadcast(:w5, "g", rounds)
sent = GotpBench.clock()
W5.wait(members, :drained)
deliveries = members * rounds
GotpBench.line("W5_pg_broadcast", deliveries, GotpBench.clock() - t0, "-",
  members: members, broadcasts: rounds, send_ns_per_delivery: (sent - t0) / deliveries)

# For comparison: one join call with the whole list of pids.
GotpBench.pause()
t0 = GotpBench.clock()
:ok = :pg.join(:w5, "all_at_once", pids)
elapsed = GotpBench.clock() - t0
^members = length(:pg.get_members(:w5, "all_at_once"))
GotpBench.line("W5_pg_join_batch_list", members, elapsed, "-", members: members)
for p <- pids, do: send(p, :stop)
