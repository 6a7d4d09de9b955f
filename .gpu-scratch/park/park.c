// Probe: can device memory outlive a driver checkpoint of the process that
// made it, held only by exported POSIX file descriptors in another process?
// usage: park GIB CHUNK_MIB READYFILE
#define _GNU_SOURCE
#include <cuda.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>
static double now(){struct timespec t;clock_gettime(CLOCK_MONOTONIC,&t);return t.tv_sec*1e3+t.tv_nsec/1e6;}
#define CK(x) do{CUresult _r=(x); if(_r){const char*s="";cuGetErrorString(_r,&s);printf("FAIL %s: %d %s (line %d)\n",#x,_r,s,__LINE__);exit(1);}}while(0)
static int sendfds(int sock,int*fds,int n){
  for(int i=0;i<n;i+=200){int k=n-i<200?n-i:200; char buf[CMSG_SPACE(200*sizeof(int))]; memset(buf,0,sizeof buf);
    struct iovec io={.iov_base=&k,.iov_len=sizeof k}; struct msghdr m={0}; m.msg_iov=&io;m.msg_iovlen=1;m.msg_control=buf;m.msg_controllen=CMSG_SPACE(k*sizeof(int));
    struct cmsghdr*c=CMSG_FIRSTHDR(&m);c->cmsg_level=SOL_SOCKET;c->cmsg_type=SCM_RIGHTS;c->cmsg_len=CMSG_LEN(k*sizeof(int));memcpy(CMSG_DATA(c),fds+i,k*sizeof(int));
    if(sendmsg(sock,&m,0)<0){perror("sendmsg");return -1;}}
  return 0;}
static int recvfds(int sock,int*fds,int n){
  for(int i=0;i<n;){int k; char buf[CMSG_SPACE(200*sizeof(int))]; struct iovec io={.iov_base=&k,.iov_len=sizeof k}; struct msghdr m={0};
    m.msg_iov=&io;m.msg_iovlen=1;m.msg_control=buf;m.msg_controllen=sizeof buf; if(recvmsg(sock,&m,0)<=0){perror("recvmsg");return -1;}
    struct cmsghdr*c=CMSG_FIRSTHDR(&m); memcpy(fds+i,CMSG_DATA(c),k*sizeof(int)); i+=k;}
  return 0;}
static volatile int go=0; static void onusr1(int s){(void)s;go=1;}
int main(int argc,char**argv){
  int gib=atoi(argv[1]); size_t chunk=(size_t)atoi(argv[2])<<20; const char*ready=argv[3];
  int n=(int)(((size_t)gib<<30)/chunk); int sp[2]; socketpair(AF_UNIX,SOCK_SEQPACKET,0,sp);
  pid_t holder=fork();
  if(holder==0){ // holds fds, no CUDA
    close(sp[0]); int*fds=malloc(sizeof(int)*2*n); if(recvfds(sp[1],fds,2*n))exit(1);
    printf("holder: holding %d fds\n",2*n); fflush(stdout);
    char c; if(read(sp[1],&c,1)!=1)exit(1); if(sendfds(sp[1],fds,2*n))exit(1); for(int i=0;i<2*n;i++)close(fds[i]); exit(0);}
  close(sp[1]); signal(SIGUSR1,onusr1);
  CK(cuInit(0)); CUdevice dev; CK(cuDeviceGet(&dev,0)); CUcontext ctx; CK(cuDevicePrimaryCtxRetain(&ctx,dev)); CK(cuCtxSetCurrent(ctx));
  CUmemAllocationProp p; memset(&p,0,sizeof p); p.type=CU_MEM_ALLOCATION_TYPE_PINNED; p.location.type=CU_MEM_LOCATION_TYPE_DEVICE; p.location.id=0;
  p.requestedHandleTypes=CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR;
  CUmemAccessDesc acc; memset(&acc,0,sizeof acc); acc.location=p.location; acc.flags=CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
  CUdeviceptr live,shadow; CK(cuMemAddressReserve(&live,(size_t)n*chunk,0,0,0)); CK(cuMemAddressReserve(&shadow,(size_t)n*chunk,0,0,0));
  CUmemGenericAllocationHandle*h=calloc(2*n,sizeof *h); double t=now();
  for(int i=0;i<2*n;i++){CUdeviceptr va=(i<n?live:shadow)+(size_t)(i%n)*chunk; CK(cuMemCreate(&h[i],chunk,&p,0)); CK(cuMemMap(va,chunk,0,h[i],0)); CK(cuMemSetAccess(va,chunk,&acc,1));}
  printf("create+map %d chunks of %zu MiB: %.1f ms\n",2*n,chunk>>20,now()-t);
  for(int i=0;i<n;i++) CK(cuMemsetD32(live+(size_t)i*chunk,0x1000+i,chunk/4)); CK(cuCtxSynchronize());
  CUstream st; CK(cuStreamCreate(&st,CU_STREAM_NON_BLOCKING));
  for(int rep=0;rep<3;rep++){t=now(); CK(cuMemcpyDtoDAsync(shadow,live,(size_t)n*chunk,st)); CK(cuStreamSynchronize(st)); printf("D2D snapshot %d GiB: %.2f ms\n",gib,now()-t);}
  int*fds=malloc(sizeof(int)*2*n); t=now();
  for(int i=0;i<2*n;i++) CK(cuMemExportToShareableHandle(&fds[i],h[i],CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR,0));
  double te=now()-t; t=now(); if(sendfds(sp[0],fds,2*n))return 1; for(int i=0;i<2*n;i++)close(fds[i]); double ts=now()-t; t=now();
  CK(cuMemUnmap(live,(size_t)n*chunk)); CK(cuMemUnmap(shadow,(size_t)n*chunk)); for(int i=0;i<2*n;i++)CK(cuMemRelease(h[i]));
  printf("export %.1f ms, send %.1f ms, unmap+release %.1f ms\n",te,ts,now()-t); fflush(stdout);
  FILE*f=fopen(ready,"w"); fprintf(f,"%d\n",getpid()); fclose(f);
  while(!go) pause();
  t=now(); char c=1; if(write(sp[0],&c,1)!=1)return 1; if(recvfds(sp[0],fds,2*n))return 1; double tr=now()-t; t=now();
  for(int i=0;i<2*n;i++){CUdeviceptr va=(i<n?live:shadow)+(size_t)(i%n)*chunk; CK(cuMemImportFromShareableHandle(&h[i],(void*)(long)fds[i],CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR)); CK(cuMemMap(va,chunk,0,h[i],0)); close(fds[i]);}
  CK(cuMemSetAccess(live,(size_t)n*chunk,&acc,1)); CK(cuMemSetAccess(shadow,(size_t)n*chunk,&acc,1));
  printf("receive %.1f ms, import+map %.1f ms\n",tr,now()-t);
  int bad=0; unsigned w[1024];
  for(int i=0;i<2*n;i++){CUdeviceptr va=(i<n?live:shadow)+(size_t)(i%n)*chunk; size_t offs[3]={0,chunk/2,chunk-sizeof w};
    for(int k=0;k<3;k++){CK(cuMemcpyDtoH(w,va+offs[k],sizeof w)); for(int j=0;j<1024;j++) if(w[j]!=(unsigned)(0x1000+i%n)){bad++;break;}}}
  printf("verify after checkpoint/restore: %s (%d bad samples)\n",bad?"FAIL":"ok",bad);
  // the client keeps running: write the live memory, the shadow must not change
  CK(cuMemsetD32(live,0xdead,chunk/4)); CK(cuCtxSynchronize()); CK(cuMemcpyDtoH(w,shadow,sizeof w)); printf("shadow independent: %s\n",w[0]==0x1000?"ok":"FAIL");
  waitpid(holder,0,0); return bad?1:0;
}
