import sys, collections, json
name=sys.argv[1]; d='/tmp/gw7/runs/'
row=json.load(open(f"{d}{name}.json"))["rows"][0]
frames=row["frames_per_s"]*15
incl=collections.Counter(); tot=collections.Counter()
for line in open(f'{d}{name}.pyspy.txt'):
    stack,_,n=line.rstrip().rpartition(' '); n=int(n)
    fr=stack.split(';')
    if fr[0].startswith('Thread._bootstrap'): t='thread'
    else: t='loop'
    if 'select' in fr[-1] and 'Selector' in fr[-1]: t+='-select'
    tot[t]+=n
    if t!='loop': continue
    seen=set()
    for f in fr:
        k=f.split(' (')[0]+' '+f.split('/')[-1].split(':')[0] if '/' in f else f.split(' (')[0]
        if k not in seen: seen.add(k); incl[k]+=n
print(f"us/frame {1e6*row['cpu_cores']/row['frames_per_s']:.0f}")
for k,v in tot.most_common(): print(f"{v*5000/frames:7.1f} {k}")
for k,v in incl.most_common(int(sys.argv[2])): print(f"{v*5000/frames:7.1f} {k}")
