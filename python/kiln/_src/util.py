"""jax._src.util: the small sequence helpers JAX's modules and libraries share (safe_map and
safe_zip check that their sequences have one length; unzip2/unzip3 split a sequence of tuples;
split_list cuts a list at given lengths)."""
import builtins


def _check_lengths(name, seqs):
    lengths = [len(s) for s in seqs]
    if len(set(lengths)) > 1:
        raise ValueError(f"{name}: sequences of unequal lengths {lengths}")


def safe_map(f, *seqs):
    """builtins.map that insists every sequence has the same length (a list)."""
    seqs = [list(s) for s in seqs]
    _check_lengths("safe_map", seqs)
    return list(builtins.map(f, *seqs))


def safe_zip(*seqs):
    """builtins.zip that insists every sequence has the same length (a list)."""
    seqs = [list(s) for s in seqs]
    _check_lengths("safe_zip", seqs)
    return list(builtins.zip(*seqs))


def unzip2(pairs):
    """A sequence of pairs as two tuples (firsts, seconds)."""
    firsts, seconds = [], []
    for first, second in pairs:
        firsts.append(first)
        seconds.append(second)
    return tuple(firsts), tuple(seconds)


def unzip3(triples):
    a, b, c = [], [], []
    for x, y, z in triples:
        a.append(x)
        b.append(y)
        c.append(z)
    return tuple(a), tuple(b), tuple(c)


def split_list(args, ns):
    """args cut into len(ns) + 1 lists: the first ns[0] items, the next ns[1], ..., the rest."""
    args = list(args)
    out = []
    for n in ns:
        out.append(args[:n])
        args = args[n:]
    out.append(args)
    return out


def concatenate(xs):
    return [x for x in xs for x in x]
