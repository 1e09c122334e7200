# W1 and W2 on the BEAM: Elixir's unique Registry, first with as many
# partitions as schedulers, then with one.
#   elixir w1_w2_registry_unique.exs
# W1: 8 processes register 125,000 distinct keys each (1,000,000 in all).
# W2: then 8 processes each look up 1,000,000 random keys that exist.
# gotp's side: BenchmarkW1RegistryRegister and BenchmarkW2RegistryLookup in
# package registry.
Code.require_file("anchor.exs", __DIR__)

defmodule W12 do
  def register(_reg, k, last) when k > last, do: :ok

  def register(reg, k, last) do
    {:ok, _} = Registry.register(reg, k, nil)
    register(reg, k + 1, last)
  end

  # Keys come from a 32-bit linear congruential generator, so that each
  # reader looks up its own random sequence without calling :rand.
  def next(x), do: Bitwise.band(x * 1_664_525 + 1_013_904_223, 0xFFFFFFFF)
  def key(x, keys), do: rem(Bitwise.bsr(x, 8), keys)

  def look_up(_reg, 0, _x, _keys), do: :ok

  def look_up(reg, n, x, keys) do
    x = next(x)
    [{_, _}] = Registry.lookup(reg, key(x, keys))
    look_up(reg, n - 1, x, keys)
  end

  # the same loop with no lookup: what the key generation costs
  def no_look_up(0, x, _keys), do: x
  def no_look_up(n, x, keys), do: (x = next(x); _ = key(x, keys); no_look_up(n - 1, x, keys))
end

GotpBench.describe("w1_w2_registry_unique")
keys = GotpBench.size(1_000_000)
writers = 8
readers = 8
lookups = GotpBench.size(1_000_000)
per_writer = div(keys, writers)
keys = per_writer * writers

measure = fn partitions, name ->
  ets0 = :erlang.memory(:ets)
  {:ok, _} = Registry.start_link(keys: :unique, name: name, partitions: partitions)

  {ns, holders} =
    GotpBench.together(writers, fn i -> W12.register(name, i * per_writer, (i + 1) * per_writer - 1) end)

  ^keys = Registry.count(name)
  GotpBench.line("W1_registry_unique_register_p#{partitions}", keys, ns,
    GotpBench.bytes_each(:erlang.memory(:ets) - ets0, keys, "key"),
    partitions: partitions, writers: writers, keys: keys)

  GotpBench.pause()
  {ns, lookers} = GotpBench.together(readers, fn i -> W12.look_up(name, lookups, 7 + i * 7919, keys) end)
  for p <- lookers, do: send(p, :stop)
  t0 = GotpBench.clock()
  W12.no_look_up(lookups, 1, keys)
  keygen = (GotpBench.clock() - t0) / lookups
  GotpBench.line("W2_registry_unique_lookup_p#{partitions}", readers * lookups, ns, "-",
    partitions: partitions, readers: readers, keygen_ns_one_reader: keygen)
  holders
end

_held = measure.(System.schedulers_online(), :w12_sched)
GotpBench.pause()
_held1 = measure.(1, :w12_one)
