import sys,json
name=sys.argv[1]; d='./'
a={l.split()[0]:l.split() for l in open(f'{d}{name}.t0')}
b={l.split()[0]:l.split() for l in open(f'{d}{name}.t1')}
row=json.load(open(f'{d}{name}.json'))['rows'][0]
fr=row['frames_per_s']*15
print(name, 'us/frame', round(1e6*row['cpu_cores']/row['frames_per_s']), 'p99', row['jitter']['p99_ms'], 'lag p99', row['loop_lag']['p99_ms'])
for k in b:
    if k in a:
        d=int(b[k][2])-int(a[k][2])
        if d: print(f"  {b[k][1]:16s} {d*10000/fr:7.1f} us/frame (user {(int(b[k][3])-int(a[k][3]))*10000/fr:.1f}, sys {(int(b[k][4])-int(a[k][4]))*10000/fr:.1f})")
