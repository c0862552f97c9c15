#!/usr/bin/env python3
"""The house's shape, checked (issue 35): run as `python3 .ci/house.py [ROOT] [--layers]`.

- Sizes: no source file of the crates (src/, cli/src/, model/src/) over 600 lines, no function
  over 80 lines (rustfmt-formatted code, counted from its `fn` line to its closing brace).
- Imports: an arrow from file A to file B when A `use`s an item that B defines (a `use` of a name
  that a module only re-exports or imports is followed to the file defining it; a `pub use`
  re-export is the module's face, not an arrow). No circle among files, and none among a crate's
  top-level modules: a lower layer never imports from a higher one. `--layers` prints the layers.

Reads files as text (no build). Exits 1 when anything is over or circular.
"""
import os, re, sys

ARGS = [a for a in sys.argv[1:] if not a.startswith("--")]
root = ARGS[0] if ARGS else os.path.join(os.path.dirname(os.path.abspath(__file__)), "..")
FN = re.compile(r'^(\s*)(pub(\([^)]*\))?\s+)?(const\s+)?(unsafe\s+)?(extern\s+"C"\s+)?fn\s+(\w+)')

def rust_files(dirs):
    for d in dirs:
        for base, _, files in os.walk(os.path.join(root, d)):
            for f in files:
                if f.endswith(".rs"):
                    yield os.path.join(base, f)

def functions(lines):
    i = 0
    while i < len(lines):
        m = FN.match(lines[i])
        if not m:
            i += 1
            continue
        indent, name = m.group(1), m.group(7)
        # find body start or ';'
        j = i
        while j < len(lines) and '{' not in lines[j] and not lines[j].rstrip().endswith(';'):
            j += 1
        if j >= len(lines) or ('{' not in lines[j]):
            i = j + 1
            continue
        if lines[j].rstrip().endswith('}') and j == i:
            i += 1
            continue
        k = j + 1
        while k < len(lines) and lines[k].rstrip() != indent + '}':
            k += 1
        yield name, i + 1, k - i + 1
        i += 1  # nested fns are reported too

def report_sizes():
    big_files, big_fns = [], []
    for path in sorted(rust_files(["src", "cli/src", "model/src"])):
        lines = open(path).read().split("\n")
        n = len(lines) - (1 if lines[-1] == "" else 0)
        rel = os.path.relpath(path, root)
        if n > 600:
            big_files.append((n, rel))
        for name, line, size in functions(lines):
            if size > 80:
                big_fns.append((size, f"{rel}:{line} {name}"))
    for n, rel in sorted(big_files, reverse=True):
        print(f"file {n} lines: {rel}")
    for size, what in sorted(big_fns, reverse=True):
        print(f"fn {size} lines: {what}")
    return len(big_files) + len(big_fns)


# ---------------------------------------------------------------------------------------------
# Imports: an arrow from file A to file B when A `use`s an item that B defines (re-exports
# followed to the defining file; `pub use` itself is a re-export, not an arrow).

ITEM = re.compile(r'^\s*(?:pub(?:\([^)]*\))?\s+)?(?:const\s+|unsafe\s+|async\s+)*'
                  r'(?:struct|enum|trait|type|fn|const|static|union|mod)\s+(\w+)')
INLINE_MOD = re.compile(r'^(\s*)(?:pub(?:\([^)]*\))?\s+)?mod\s+(\w+)\s*\{')


def module_path(crate_dir, path):
    rel = os.path.relpath(path, crate_dir)[:-3].split(os.sep)
    if rel[-1] in ("mod", "lib", "main"):
        rel = rel[:-1]
    return tuple(rel)


def parse_uses(lines):
    """Yields (line_no, is_pub, text, inline_mod_stack) for each use statement."""
    stack = []  # (indent, name)
    i = 0
    while i < len(lines):
        line = lines[i]
        while stack and line.rstrip() == stack[-1][0] + '}':
            stack.pop()
            break
        m = INLINE_MOD.match(line)
        if m and not line.rstrip().endswith('}'):
            stack.append((m.group(1), m.group(2)))
            i += 1
            continue
        m = re.match(r'^\s*(pub(?:\([^)]*\))?\s+)?use\s+(.*)$', line)
        if m:
            text = m.group(2)
            j = i
            while not text.rstrip().endswith(';'):
                j += 1
                text += ' ' + lines[j].strip()
            yield i + 1, bool(m.group(1)), text.rstrip()[:-1], [n for _, n in stack]
            i = j + 1
            continue
        i += 1


class Crate:
    def __init__(self, crate_dir, name):
        self.dir, self.name = crate_dir, name
        self.files = {}  # module path -> file
        self.items = {}  # module path -> set of names
        self.binds = {}  # module path -> {name: (from_mod_path, full segs)}
        self.uses = []   # (file, modpath(with inline), line, is_pub, segs, alias)
        for path in rust_files([os.path.relpath(crate_dir, root)]):
            mp = module_path(crate_dir, path)
            self.files[mp] = os.path.relpath(path, root)
        for mp, rel in self.files.items():
            lines = open(os.path.join(root, rel)).read().split("\n")
            names = set()
            for line in lines:
                m = ITEM.match(line)
                if m:
                    names.add(m.group(1))
            self.items[mp] = names
            for line_no, is_pub, text, inline in parse_uses(lines):
                here = mp + tuple(inline)
                for segs, alias in self.expand(text):
                    self.uses.append((rel, mp, here, line_no, is_pub, segs, alias))
                    if not inline:
                        self.binds.setdefault(mp, {})[alias] = (here, segs)

    @staticmethod
    def expand(text):
        res = []
        for raw in split_use_raw(text):
            m = re.match(r'^(.*?)\s+as\s+(\w+)$', raw.strip())
            path, alias = (m.group(1), m.group(2)) if m else (raw.strip(), None)
            segs = [s for s in re.sub(r'\s+', '', path).split('::') if s]
            if not segs:
                continue
            if segs[-1] == 'self':
                segs = segs[:-1]
            res.append((segs, alias or segs[-1]))
        return res

    def absolute(self, here, segs):
        """Absolute module path segments for a use path written in module `here`."""
        segs = list(segs)
        if segs[0] == 'crate':
            return segs[1:]
        cur = list(here)
        if segs[0] == 'self':
            return cur + segs[1:]
        if segs[0] == 'super':
            while segs and segs[0] == 'super':
                cur = cur[:-1]
                segs = segs[1:]
            return cur + segs
        # 2018: a child module of `here`, or of the file's module, else an external crate
        if tuple(here) + (segs[0],) in self.files:
            return cur + segs
        return None

    def resolve(self, absolute, depth=0):
        """The file module that defines the item `absolute` names (or the module itself)."""
        if depth > 20 or absolute is None:
            return None
        if tuple(absolute) in self.files:
            return tuple(absolute)
        if absolute and absolute[-1] == '*':
            mod = tuple(absolute[:-1])
            return mod if mod in self.files else None
        # longest prefix that is a file module
        for k in range(len(absolute) - 1, -1, -1):
            mod = tuple(absolute[:k])
            if mod in self.files:
                rest = absolute[k:]
                name = rest[0]
                if name in self.items.get(mod, ()) and name not in self.binds.get(mod, {}):
                    return mod
                bind = self.binds.get(mod, {}).get(name)
                if bind:
                    here, segs = bind
                    target = self.absolute(here, segs)
                    if target is None:
                        return None
                    return self.resolve(target + rest[1:], depth + 1)
                return mod if name in self.items.get(mod, ()) else None
        return None

    def edges(self):
        out = {}
        for rel, mp, here, line_no, is_pub, segs, alias in self.uses:
            if is_pub:
                continue
            target = self.resolve(self.absolute(here, segs))
            if target is None or target == mp:
                continue
            out.setdefault(mp, {}).setdefault(target, []).append(f"{rel}:{line_no}")
        return out


def split_use_raw(text):
    text = text.strip()
    res = []

    def walk(prefix, s):
        depth, parts, cur = 0, [], ''
        for ch in s:
            if ch == '{':
                depth += 1
            elif ch == '}':
                depth -= 1
            if ch == ',' and depth == 0:
                parts.append(cur)
                cur = ''
            else:
                cur += ch
        if cur.strip():
            parts.append(cur)
        for p in parts:
            p = p.strip()
            if '{' in p:
                head, rest = p.split('{', 1)
                walk(prefix + head.strip(), rest.rsplit('}', 1)[0])
            else:
                res.append(prefix + p)
    walk('', text)
    return res


def sccs(graph):
    index, low, on, stack, out, counter = {}, {}, set(), [], [], [0]
    sys.setrecursionlimit(10000)

    def visit(v):
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on.add(v)
        for w in graph.get(v, {}):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                out.append(comp)
    for v in list(graph):
        if v not in index:
            visit(v)
    return out


def report_imports():
    problems = 0
    for crate_dir, name in [("src", "pgtenure"), ("cli/src", "pgtenure-cli"), ("model/src", "pgtenure-model")]:
        if not os.path.isdir(os.path.join(root, crate_dir)):
            continue
        crate = Crate(os.path.join(root, crate_dir), name)
        graph = crate.edges()
        show = lambda mp: crate.files[mp]
        for comp in sccs(graph):
            problems += 1
            members = set(comp)
            print(f"circle among files ({name}): " + ", ".join(sorted(show(m) for m in comp)))
            for a in sorted(comp):
                for b, where in sorted(graph.get(a, {}).items()):
                    if b in members:
                        print(f"    {show(a)} -> {show(b)}  ({', '.join(where[:3])})")
        # layers: the top-level modules must form no circle either
        top = {}
        for a, targets in graph.items():
            for b, where in targets.items():
                ta, tb = a[:1], b[:1]
                if ta != tb and ta and tb:
                    top.setdefault(ta, {}).setdefault(tb, []).extend(where)
        for comp in sccs(top):
            problems += 1
            members = set(comp)
            print(f"circle among modules ({name}): " + ", ".join(sorted("::".join(m) for m in comp)))
            for a in sorted(comp):
                for b, where in sorted(top.get(a, {}).items()):
                    if b in members:
                        print(f"    {'::'.join(a)} -> {'::'.join(b)}  ({', '.join(where[:3])})")
        if "--layers" in sys.argv:
            print(f"layers of {name}, lowest first:")
            for n, layer in enumerate(layers(top, [m for m in crate.files if len(m) == 1])):
                print(f"    {n}: " + ", ".join(sorted("::".join(m) for m in layer)))
    return problems


def layers(graph, nodes):
    """Each module's layer: one above the highest it imports from (circles left out)."""
    level = {}

    def depth(v, seen=()):
        if v in level:
            return level[v]
        if v in seen:
            return 0
        level[v] = d = 1 + max((depth(w, seen + (v,)) for w in graph.get(v, {})), default=-1)
        return d
    for v in set(nodes) | set(graph):
        depth(v)
    out = {}
    for v, d in level.items():
        out.setdefault(d, []).append(v)
    return [out[d] for d in sorted(out)]


if __name__ == "__main__":
    found = report_sizes() + report_imports()
    if found:
        print(f"house.py: {found} problem(s) in {os.path.abspath(root)}")
    sys.exit(1 if found else 0)
