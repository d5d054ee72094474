import sys,json
name=sys.argv[1]
a=json.load(open(f'{name}.s0')); b=json.load(open(f'{name}.s1'))
fr=b['frames_sent']-a['frames_sent']; 
print(name,'frames',fr,'cpu us/frame',round(1e6*(b['cpu_s']-a['cpu_s'])/fr,1),'loop',round(1e6*(b['loop_cpu_s']-a['loop_cpu_s'])/fr,1), 'wakeups/frame', round((b['pacer_wakeups']-a['pacer_wakeups'])/fr,3))
for k,(t,n) in b['instr'].items():
    t0,n0=a['instr'].get(k,[0,0]); dt=(t-t0)/1e3; dn=n-n0
    if dn: print(f"  {k:28s} {dt/fr:7.1f} us/frame  calls/frame {dn/fr:6.3f}  us/call {dt/dn:7.1f}")
