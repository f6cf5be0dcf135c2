from gpuwatch.cli import main

raise SystemExit(main())
