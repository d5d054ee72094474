import sys, collections, re
path = sys.argv[1]; depth = int(sys.argv[2]) if len(sys.argv) > 2 else 0
threads = collections.Counter(); incl = collections.Counter(); selfc = collections.Counter(); total = collections.Counter()
main = None
for line in open(path):
    stack, _, n = line.rstrip().rpartition(' ')
    n = int(n)
    frames = stack.split(';')
    th = frames[0]
    threads[th] += n
    if 'MainThread' not in th:
        continue
    fr = [re.sub(r' \(.*?:\d+\)', lambda m: m.group(0).split(':')[0] + ')', f) for f in frames[1:]]
    fr = [f.replace('(/work/main/.venv/lib/python3.11/site-packages/', '(') for f in fr]
    if not fr:
        continue
    selfc[fr[-1]] += n
    for f in set(fr):
        incl[f] += n
    total['main'] += n
print('threads:', dict(threads))
T = total['main']
print('main samples', T)
print('--- inclusive')
for f, n in incl.most_common(60):
    print(f'{100*n/T:5.1f}% {f}')
print('--- self')
for f, n in selfc.most_common(40):
    print(f'{100*n/T:5.1f}% {f}')
