# Tables for bench/before_after.sh: medians (min-max) of busbw per size and
# of training throughput, before and after, and their ratio.
import json,glob,statistics as st,sys
d=sys.argv[1] if len(sys.argv)>1 else '/tmp/ba'
def bench(who,tag):
    rows={}
    for f in sorted(glob.glob(f'{d}/{who}.{tag}.*.json')):
        for l in open(f):
            l=l.strip()
            if not l.startswith('{'): continue
            r=json.loads(l); rows.setdefault(r['bytes'],[]).append(r['busbw_gbs'])
    return rows
def train(who,tag,key):
    v=[]
    for f in sorted(glob.glob(f'{d}/{who}.{tag}.*.jsonl')):
        for l in open(f):
            r=json.loads(l)
            if r.get('event')=='done': v.append(r[key])
    return v
def human(b):
    for u,s in ((1<<20,'MiB'),(1<<10,'KiB')):
        if b>=u: return f'{b//u} {s}'
    return f'{b} B'
for tag,n in (('ar2',2),('ar4',4)):
    B=bench('before',tag); A=bench('after',tag)
    print(f'\n| all_reduce, {n} ranks | before busbw GB/s (median, min–max) | after | after/before |\n|---|---|---|---|')
    for b in sorted(B):
        mb,ma=st.median(B[b]),st.median(A[b])
        print(f'| {human(b)} | {mb:.3g} ({min(B[b]):.3g}–{max(B[b]):.3g}) | {ma:.3g} ({min(A[b]):.3g}–{max(A[b]):.3g}) | {ma/mb:.2f} |')
print('\n| training, parameter server | before (median, min–max) | after | after/before |\n|---|---|---|---|')
def row(name,b,a):
    if not b or not a:
        print(f'| {name} | {b} | {a} | missing |'); return
    print(f'| {name} | {st.median(b):.4g} ({min(b):.4g}–{max(b):.4g}) | {st.median(a):.4g} ({min(a):.4g}–{max(a):.4g}) | {st.median(a)/st.median(b):.2f} |')
for tag,key,name in (('mlp','samples_per_s','mlp samples/s, 1 epoch'),('gpt','tokens_per_s','gpt tokens/s, 30 steps'),
                     ('tp','tokens_per_s','gpt d512 --tp 2 tokens/s, 6 steps'),('pp','tokens_per_s','gpt d512 --pp 2 (1F1B x8) tokens/s, 6 steps')):
    row(name,train('before',tag,key),train('after',tag,key))
def ps(who,tag,key):
    v=[]
    for f in sorted(glob.glob(f'{d}/{who}.{tag}.*.json')):
        for l in open(f):
            l=l.strip()
            if l.startswith('{'): v.append(json.loads(l)[key])
    return v
for tag,key,name in (('psdense','algbw_gbs','ps push_pull dense 4 MiB, GB/s per worker'),
                     ('pssparse','keys_per_s_per_server','ps push_pull sparse 64-byte rows, keys/s per server')):
    row(name,ps('before',tag,key),ps('after',tag,key))
