import sys, collections, json
name=sys.argv[1]
row=json.load(open(f"{name}.json"))["rows"][0]
frames=row["frames_per_s"]*15
c=collections.Counter(); leaf=collections.Counter()
for line in open(f'{name}.pyspy.txt'):
    stack,_,n=line.rstrip().rpartition(' '); n=int(n)
    fr=stack.split(';')
    if fr[0].startswith('Thread._bootstrap'):
        t='worker' if any('encode_worker' in f for f in fr) else 'reader' if any('engine/client.py' in f for f in fr) else 'thread-other'
    else: t='loop'
    last=fr[-1]
    key=t+': '+last.split(' (')[0]+' '+(last.split('/')[-1] if '/' in last else '')
    c[t]+=n; leaf[key]+=n
print(f"us/frame {1e6*row['cpu_cores']/row['frames_per_s']:.0f}; samples -> us/frame")
for k,v in c.most_common(): print(f"{v*5000/frames:7.1f} {k}")
for k,v in leaf.most_common(int(sys.argv[2]) if len(sys.argv)>2 else 25): print(f"{v*5000/frames:7.1f} {k}")
