from gpuprof.cli import main

main()
