# W6 on the BEAM: spawn+exit rate, and the memory of an idle process.
#   elixir --erl '+P 2000000' w6_spawn.exs
# (+P raises the process limit, so a million short processes never reach it;
# it does not change what a process costs.) gotp's side: BenchmarkW6SpawnExit,
# BenchmarkW6IdleProcessBytes and BenchmarkW6IdleHandlerBytes in the root
# package.
Code.require_file("anchor.exs", __DIR__)

defmodule W6 do
  def done, do: :ok

  def parked do
    receive do: (:stop -> :ok)
  end

  # n processes that end at once; their pids are dropped at once
  def start_ending(0), do: :ok
  def start_ending(n), do: (spawn(__MODULE__, :done, []); start_ending(n - 1))

  def start_parked(0), do: :ok
  def start_parked(n), do: (spawn(__MODULE__, :parked, []); start_parked(n - 1))

  # one at a time: spawn_monitor, then wait for the DOWN
  def one_by_one(0), do: :ok

  def one_by_one(n) do
    {_, ref} = spawn_monitor(__MODULE__, :done, [])
    receive do: ({:DOWN, ^ref, :process, _, _} -> :ok)
    one_by_one(n - 1)
  end
end

GotpBench.describe("w6_spawn")
spawns = GotpBench.size(1_000_000)
idle = GotpBench.size(100_000)
count = fn -> :erlang.system_info(:process_count) end

# 1. A million processes that end at once: from the first spawn until the
# process count is back where it was.
GotpBench.pause()
before = count.()
t0 = GotpBench.clock()
W6.start_ending(spawns)
spawned = GotpBench.clock()
GotpBench.await(fn -> count.() <= before end)
GotpBench.line("W6_spawn_exit", spawns, GotpBench.clock() - t0, "-",
  n: spawns, spawn_loop_ns_per_op: (spawned - t0) / spawns)

# 2. The same one at a time, waiting for each one's DOWN (a lifecycle's latency).
GotpBench.pause()
n = max(1, div(spawns, 10))
t0 = GotpBench.clock()
W6.one_by_one(n)
GotpBench.line("W6_spawn_monitor_wait_seq", n, GotpBench.clock() - t0, "-", n: n)

# 3. 100,000 processes parked in receive: what :erlang.memory(:processes)
# grows by, per process.
GotpBench.pause()
mem0 = :erlang.memory(:processes)
t0 = GotpBench.clock()
W6.start_parked(idle)
t1 = GotpBench.clock()
# every new process has reached its receive once the last ones have
GotpBench.await(fn ->
  Process.list()
  |> Enum.take(-10)
  |> Enum.all?(fn p -> Process.info(p, :status) in [{:status, :waiting}, nil] end)
end)
Process.sleep(200)
:erlang.garbage_collect()
mem1 = :erlang.memory(:processes)
{:memory, one} = Process.info(List.last(Process.list()), :memory)
GotpBench.line("W6_idle_process_memory", idle, t1 - t0, GotpBench.bytes_each(mem1 - mem0, idle, "proc"),
  n: idle, process_info_memory_bytes: one)
