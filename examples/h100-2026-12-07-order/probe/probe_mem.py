import gc,torch
from studylib.instruments.backends import sgl_kernel_backend as b
G=2**30
torch.cuda.memory._record_memory_history(max_entries=200000)
p=dict(backend='sgl_kernel',impl='triton',op='fused_moe',dtype='bf16',shape='down',M=1,N=6144,K=2048,G=256,top_k=8,routing='balanced')
def show(t): torch.cuda.synchronize(); gc.collect(); print(t, round(torch.cuda.memory_allocated()/G,2), flush=True)
pr=b.prepare(p,'cuda'); show('prepared')
out=pr.run(); show('run')
ref=pr.reference(); show('reference')
del out,ref; show('outputs dropped')
g=torch.cuda.CUDAGraph()
s=torch.cuda.Stream(); s.wait_stream(torch.cuda.current_stream())
with torch.cuda.stream(s): pr.run()
torch.cuda.current_stream().wait_stream(s)
with torch.cuda.graph(g): pr.run()
g.replay(); show('graph')
del g; show('graph dropped')
del pr; show('point dropped')
snap=torch.cuda.memory._snapshot()
bl=[x for sg in snap['segments'] for x in sg['blocks'] if x['state']=='active_allocated']
bl.sort(key=lambda x:-x['size'])
for x in bl[:5]:
    fr=[f"{f['filename'].split('site/')[-1].split('scripts/')[-1]}:{f['line']} {f['name']}" for f in x.get('frames',[]) if f['filename'].endswith('.py')]
    print(round(x['size']/G,3),'GiB'); [print('   ',f) for f in fr[:14]]
