# W4 on the BEAM: how fast Elixir's unique Registry forgets the keys of
# processes that exit.
#   elixir --erl '+P 2000000' w4_registry_cleanup.exs
# 1. 100,000 processes hold one key each; all are told to end at once; timed
#    until the registry's count is 0 (also at 10,000, to show how it scales).
# 2. 100,000 processes each start, register a key and end; timed from the
#    first start until every one has registered and the count is 0.
# gotp's side: BenchmarkW4RegistryCleanup in package registry.
Code.require_file("anchor.exs", __DIR__)

defmodule W4 do
  def holder(me, reg, key) do
    {:ok, _} = Registry.register(reg, key, nil)
    send(me, :registered)
    receive do: (:stop -> :ok)
  end

  def passer(me, reg, key) do
    {:ok, _} = Registry.register(reg, key, nil)
    send(me, :registered)
  end

  def start(_me, _reg, n, n, _f, acc), do: acc
  def start(me, reg, i, n, f, acc), do: start(me, reg, i + 1, n, f, [spawn(__MODULE__, f, [me, reg, i]) | acc])

  def wait(0), do: :ok
  def wait(n), do: receive(do: (:registered -> wait(n - 1)))

  def stop([]), do: :ok
  def stop([p | rest]), do: (send(p, :stop); stop(rest))
end

GotpBench.describe("w4_registry_cleanup")
procs = GotpBench.size(100_000)
scheds = System.schedulers_online()
empty = fn reg -> fn -> Registry.count(reg) == 0 end end

cleanup = fn name, reg, n ->
  {:ok, _} = Registry.start_link(keys: :unique, name: reg, partitions: scheds)
  holders = W4.start(self(), reg, 0, n, :holder, [])
  W4.wait(n)
  ^n = Registry.count(reg)
  GotpBench.pause()
  t0 = GotpBench.clock()
  W4.stop(holders)
  told = GotpBench.clock()
  GotpBench.await(empty.(reg))
  GotpBench.line(name, n, GotpBench.clock() - t0, "-", procs: n, stop_ns_per_proc: (told - t0) / n)
  GotpBench.pause()
end

cleanup.("W4_registry_cleanup_p#{scheds}", :w4_big, procs)
small = max(1, div(procs, 10))
cleanup.("W4_registry_cleanup_p#{scheds}_#{div(small, 1000)}k", :w4_small, small)

{:ok, _} = Registry.start_link(keys: :unique, name: :w4_cycle, partitions: scheds)
t0 = GotpBench.clock()
W4.start(self(), :w4_cycle, 0, procs, :passer, [])
W4.wait(procs)
registered = GotpBench.clock()
GotpBench.await(empty.(:w4_cycle))
GotpBench.line("W4_registry_spawn_register_exit_cycle_p#{scheds}", procs, GotpBench.clock() - t0, "-",
  procs: procs, until_registered_ns_per_proc: (registered - t0) / procs)
