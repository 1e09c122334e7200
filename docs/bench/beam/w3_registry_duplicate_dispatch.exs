# W3 on the BEAM: Elixir's duplicate Registry as pub/sub. 10,000 processes
# register under one key, in a registry with as many partitions as
# schedulers and in one with a single partition; 100 dispatches each send a
# message to every entry, and the receivers drain them.
#   elixir w3_registry_duplicate_dispatch.exs
# gotp's side: BenchmarkW3RegistryDispatch in package registry.
Code.require_file("anchor.exs", __DIR__)

defmodule W3 do
  # A subscriber: registers under key in every registry, says so, then
  # tells me each time it has taken `per_round` messages.
  def subscriber(me, regs, key, per_round) do
    for r <- regs, do: {:ok, _} = Registry.register(r, key, nil)
    send(me, :subscribed)
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
  def send_each([{pid, _} | rest], msg), do: (send(pid, msg); send_each(rest, msg))

  def dispatch(_reg, _key, 0, _opts), do: :ok

  def dispatch(reg, key, n, opts) do
    Registry.dispatch(reg, key, fn entries -> send_each(entries, {:msg, n}) end, opts)
    dispatch(reg, key, n - 1, opts)
  end

  def wait(0, _tag), do: :ok
  def wait(n, tag), do: receive(do: (^tag -> wait(n - 1, tag)))
end

GotpBench.describe("w3_registry_duplicate_dispatch")
subscribers = GotpBench.size(10_000)
rounds = 100
key = "topic"
scheds = System.schedulers_online()

{:ok, _} = Registry.start_link(keys: :duplicate, name: :w3_sched, partitions: scheds)
{:ok, _} = Registry.start_link(keys: :duplicate, name: :w3_one, partitions: 1)
me = self()
ets0 = :erlang.memory(:ets)
subs = for _ <- 1..subscribers, do: spawn(W3, :subscriber, [me, [:w3_sched, :w3_one], key, rounds])
W3.wait(subscribers, :subscribed)
per_entry = (:erlang.memory(:ets) - ets0) / (2 * subscribers)
^subscribers = length(Registry.lookup(:w3_sched, key))

run = fn name, reg, opts ->
  GotpBench.pause()
  t0 = GotpBench.clock()
  W3.dispatch(reg, key, rounds, opts)
  sent = GotpBench.clock()
  W3.wait(subscribers, :drained)
  deliveries = subscribers * rounds
  GotpBench.line(name, deliveries, GotpBench.clock() - t0, "#{GotpBench.num(per_entry)}B/entry",
    subscribers: subscribers, dispatches: rounds, dispatch_ns_per_delivery: (sent - t0) / deliveries)
end

run.("W3_registry_duplicate_dispatch_p#{scheds}", :w3_sched, [])
run.("W3_registry_duplicate_dispatch_p#{scheds}_parallel", :w3_sched, parallel: true)
run.("W3_registry_duplicate_dispatch_p1", :w3_one, [])
for p <- subs, do: send(p, :stop)
